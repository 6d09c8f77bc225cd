/**
 * The built package the tests run, loaded with Node's `require` as n8n loads it: this
 * directory's dist/ (`make test-n8n-node`), or, with LEADGATE_NODE_PACKAGE set, the
 * package installed from the `npm pack` tarball into a real n8n's nodes folder
 * (tests/n8n_package.rs; NODE_PATH then points at that n8n's node_modules, as n8n sets it,
 * so the package's `n8n-workflow` is n8n's own).
 */
import { join, resolve } from 'node:path';

import type * as CredentialModule from '../dist/credentials/LeadgateApi.credentials';
import type * as NodeModule from '../dist/nodes/Leadgate/Leadgate.node';
import type * as ProtocolModule from '../dist/nodes/Leadgate/protocol';

export const packageRoot = resolve(process.env.LEADGATE_NODE_PACKAGE || join(__dirname, '..'));

export function load<T>(file: string): T {
	return require(join(packageRoot, file)) as T;
}

export const { Leadgate } = load<typeof NodeModule>('dist/nodes/Leadgate/Leadgate.node.js');
export const { apiRoot, classifyHttpStatus, classifyTransportError } = load<typeof ProtocolModule>(
	'dist/nodes/Leadgate/protocol.js',
);
export const { LeadgateApi } = load<typeof CredentialModule>('dist/credentials/LeadgateApi.credentials.js');
