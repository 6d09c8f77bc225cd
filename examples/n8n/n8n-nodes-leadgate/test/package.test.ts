/**
 * What n8n's loader and its community-node listing need from the package (no gateway
 * here): package.json's metadata and `n8n` section naming built files; each node file
 * `X.node.js` exports a class `X`, each credential file `Y.credentials.js` a class `Y`;
 * their light and dark icons ship in the package; the credential the node asks for is
 * the one the package brings; `npm pack` ships all of it and nothing else. Run on this
 * directory, or on the package installed from the tarball (see ./built).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { load, packageRoot } from './built';

const pkg = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8'));

function instance(file: string, suffix: string) {
	const name = basename(file, `${suffix}.js`);
	const Class = load<Record<string, new () => unknown>>(file)[name];
	expect(Class, `${file} exports ${name}`).toBeTypeOf('function');
	return new Class() as Record<string, any>;
}

/** Both variants of a themed `file:` icon exist, relative to the file that names it. */
function expectIcons(icon: unknown, file: string) {
	expect(icon, `${file}: a light and a dark icon`).toMatchObject({
		light: expect.stringMatching(/^file:.+\.svg$/),
		dark: expect.stringMatching(/^file:.+\.svg$/),
	});
	const { light, dark } = icon as { light: string; dark: string };
	expect(light).not.toBe(dark);
	for (const ref of [light, dark]) {
		const path = join(packageRoot, dirname(file), ref.replace(/^file:/, ''));
		expect(path.startsWith(packageRoot), `${ref} stays inside the package`).toBe(true);
		expect(existsSync(path), `${ref} of ${file}`).toBe(true);
	}
}

describe('the package as n8n loads it', () => {
	it('has the metadata of an n8n community node package', () => {
		expect(pkg.name).toMatch(/^n8n-nodes-/);
		expect(pkg.keywords).toContain('n8n-community-node-package');
		expect(pkg.version).toMatch(/^\d+\.\d+\.\d+$/);
		expect(pkg.license).toBe('MIT');
		expect(pkg.description).not.toBe('');
		expect(pkg.author).toMatchObject({ name: expect.any(String), email: expect.stringContaining('@') });
		expect(pkg.repository).toMatchObject({ type: 'git', url: expect.stringMatching(/^git\+https:\/\//) });
		expect(pkg.homepage).toMatch(/^https:\/\//);
		expect(pkg.files).toEqual(['dist', 'README.md']);
		expect(pkg.n8n.n8nNodesApiVersion).toBe(1);
		// n8n installs a community package with --ignore-scripts and no dependencies of its own.
		expect(pkg.dependencies ?? {}).toEqual({});
		const lifecycle = Object.keys(pkg.scripts ?? {}).filter((s) => /^(pre|post)?install$|^prepare$/.test(s));
		expect(lifecycle).toEqual([]);
	});

	it('names built nodes and credentials that load, with their icons', () => {
		const credentials = pkg.n8n.credentials.map((f: string) => {
			const c = instance(f, '.credentials');
			expectIcons(c.icon, f);
			return c;
		});
		expect(credentials.map((c: { name: string }) => c.name)).toEqual(['leadgateApi']);
		for (const file of pkg.n8n.nodes) {
			const node = instance(file, '.node');
			expectIcons(node.description.icon, file);
			for (const c of node.description.credentials ?? []) {
				expect(credentials.map((k: { name: string }) => k.name)).toContain(c.name);
			}
			expect(
				node.description.properties
					.find((p: { name: string }) => p.name === 'operation')
					.options.map((o: { value: string }) => o.value),
			).toEqual(['claim', 'complete', 'fail']);
		}
	});

	it('npm pack ships every file the n8n section names, and no sources or tests', () => {
		const [packed] = JSON.parse(
			execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
				cwd: packageRoot,
				encoding: 'utf8',
			}),
		);
		const files: string[] = packed.files.map((f: { path: string }) => f.path);
		for (const f of [
			...pkg.n8n.credentials,
			...pkg.n8n.nodes,
			'dist/icons/leadgate.svg',
			'dist/icons/leadgate.dark.svg',
			'package.json',
			'README.md',
		]) {
			expect(files).toContain(f);
		}
		const stray = files.filter((f) => !f.startsWith('dist/') && !['package.json', 'README.md'].includes(f));
		expect(stray).toEqual([]);
	});
});
