// n8n's community-package scanner (@n8n/scan-community-package, pinned in package.json) on
// a package that is not on npm yet: `npm run scan -- <the npm pack tarball> [source dir]`.
//
// The scanner's command (`npx @n8n/scan-community-package NAME`) only takes a published
// package: it reads the registry, requires npm provenance, downloads the source commit the
// provenance names from GitHub, then the tarball, and lints both. Past the downloads it
// is two calls of its exported `analyzePackage`, which this script makes with the same
// arguments on local files: the source directory (default: this package) with the
// scanner's SOURCE_FILE_PATTERNS, and the unpacked tarball's compiled `.js` and its
// package.json. Only the provenance check cannot run before publishing (see
// examples/n8n/README.md: publish with `--provenance`). Exit 0 when both pass.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import {
	SOURCE_FILE_PATTERNS,
	analyzePackage,
} from '@n8n/scan-community-package/scanner/scanner.mjs';

const [tarball, sourceArg] = process.argv.slice(2);
if (!tarball || !statSync(tarball, { throwIfNoEntry: false })?.isFile()) {
	console.error('usage: npm run scan -- <package.tgz from npm pack> [source dir]');
	process.exit(2);
}
const source = resolve(sourceArg ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
const unpacked = mkdtempSync(join(tmpdir(), 'n8n-scan-'));
try {
	execFileSync('tar', ['-xzf', resolve(tarball), '-C', unpacked, '--strip-components=1']);
	const legs = [
		['source', source, SOURCE_FILE_PATTERNS],
		['tarball', unpacked, ['**/*.js', 'package.json']],
	];
	let passed = true;
	for (const [leg, dir, patterns] of legs) {
		const result = await analyzePackage(dir, patterns);
		if (result.passed) {
			console.log(`scan: ${leg} (${dir}) passed n8n's community-package checks`);
		} else {
			passed = false;
			console.log(`scan: ${leg} (${dir}) FAILED: ${result.message}`);
			if (result.details) console.log(result.details);
		}
	}
	process.exitCode = passed ? 0 : 1;
} finally {
	rmSync(unpacked, { recursive: true, force: true });
}
