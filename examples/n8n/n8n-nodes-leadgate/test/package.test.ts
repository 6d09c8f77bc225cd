/**
 * What n8n's loader needs from a community package (no gateway here): package.json's `n8n`
 * section names built files; each node file `X.node.js` exports a class `X`, each
 * credential file `Y.credentials.js` a class `Y`; the node's icon ships next to it; the
 * credential the node asks for is the one the package brings; `npm pack` ships them.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

import { describe, expect, it } from 'vitest';

const root = join(__dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

function load(file: string, suffix: string) {
	const name = basename(file, `${suffix}.js`);
	const Class = require(join(root, file))[name];
	expect(Class, `${file} exports ${name}`).toBeTypeOf('function');
	return new Class();
}

describe('the package as n8n loads it', () => {
	it('is a community node package', () => {
		expect(pkg.name).toMatch(/^n8n-nodes-/);
		expect(pkg.keywords).toContain('n8n-community-node-package');
		expect(pkg.n8n.n8nNodesApiVersion).toBe(1);
	});

	it('names built nodes and credentials that load, with the icon beside the node', () => {
		const credentials = pkg.n8n.credentials.map((f: string) => load(f, '.credentials'));
		expect(credentials.map((c: { name: string }) => c.name)).toEqual(['leadgateApi']);
		for (const file of pkg.n8n.nodes) {
			const node = load(file, '.node');
			const icon = String(node.description.icon).replace(/^file:/, '');
			expect(existsSync(join(root, dirname(file), icon)), `${icon} next to ${file}`).toBe(true);
			for (const c of node.description.credentials ?? []) {
				expect(credentials.map((k: { name: string }) => k.name)).toContain(c.name);
			}
			expect(node.description.properties.find((p: { name: string }) => p.name === 'operation').options.map(
				(o: { value: string }) => o.value,
			)).toEqual(['claim', 'complete', 'fail']);
		}
	});

	it('npm pack ships every file the n8n section names', () => {
		const [packed] = JSON.parse(
			execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' }),
		);
		const files = packed.files.map((f: { path: string }) => f.path);
		for (const f of [...pkg.n8n.credentials, ...pkg.n8n.nodes, 'dist/nodes/Leadgate/leadgate.svg', 'package.json']) {
			expect(files).toContain(f);
		}
		expect(files.some((f: string) => f.startsWith('test/') || f.startsWith('node_modules/'))).toBe(false);
	});
});
