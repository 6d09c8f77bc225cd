/**
 * The part of n8n's IExecuteFunctions the node uses, over real HTTP: parameters per item,
 * the credential (its own `authenticate` applied, as n8n applies it), and
 * `httpRequestWithAuthentication` with n8n's `json`, `returnFullResponse` and
 * `ignoreHttpStatusErrors` semantics (a transport failure throws, every answer returns).
 */
import type { IDataObject, IExecuteFunctions, IHttpRequestOptions, INodeExecutionData } from 'n8n-workflow';

import { LeadgateApi } from './built';

export interface Run {
	params: Record<string, unknown>[];
	items?: IDataObject[];
	credentials?: { url: string; integrationToken: string; tenant?: string };
	continueOnFail?: boolean;
}

export const gateway = {
	url: process.env.LEADGATE_URL ?? '',
	token: process.env.LEADGATE_INTEGRATION_TOKEN ?? '',
	claimSource: process.env.LEADGATE_CLAIM_SOURCE ?? 'n8n',
	/** A tenant the gateway serves (fleet mode), with its own integration token. */
	tenant: process.env.LEADGATE_TENANT ?? '',
	tenantToken: process.env.LEADGATE_TENANT_TOKEN ?? '',
};

if (!gateway.url || !gateway.token || !gateway.tenant || !gateway.tenantToken) {
	throw new Error(
		'LEADGATE_URL, LEADGATE_INTEGRATION_TOKEN, LEADGATE_TENANT and LEADGATE_TENANT_TOKEN are not set: run the tests through scripts/live-gateway.sh with LEADGATE_LIVE_TENANT (make test-n8n-node)',
	);
}

async function httpRequest(options: IHttpRequestOptions) {
	const res = await fetch(options.url, {
		method: options.method ?? 'GET',
		headers: options.headers as Record<string, string>,
		body: options.body === undefined ? undefined : JSON.stringify(options.body),
	});
	const text = await res.text();
	let body: unknown = text;
	if (options.json && text !== '') {
		try {
			body = JSON.parse(text);
		} catch {
			body = text;
		}
	}
	if (!res.ok && !options.ignoreHttpStatusErrors) {
		throw new Error(`Request failed with status code ${res.status}`);
	}
	if (!options.returnFullResponse) return body;
	return {
		statusCode: res.status,
		statusMessage: res.statusText,
		headers: Object.fromEntries(res.headers.entries()),
		body,
	};
}

export function context(run: Run): IExecuteFunctions {
	const credentials = run.credentials ?? { url: gateway.url, integrationToken: gateway.token };
	const items: INodeExecutionData[] = (run.items ?? run.params.map(() => ({}))).map((json) => ({ json }));
	const node = {
		id: 'leadgate-test',
		name: 'Leadgate',
		type: 'n8n-nodes-leadgate.leadgate',
		typeVersion: 1,
		position: [0, 0] as [number, number],
		parameters: {},
	};
	const ctx = {
		getInputData: () => items,
		getNode: () => node,
		getNodeParameter: (name: string, i: number, fallback?: unknown) => {
			const v = run.params[i]?.[name];
			if (v === undefined) {
				if (fallback !== undefined) return fallback;
				throw new Error(`no parameter ${name} for item ${i}`);
			}
			return v;
		},
		getCredentials: async (type: string) => {
			if (type !== 'leadgateApi') throw new Error(`unexpected credential type ${type}`);
			return credentials;
		},
		continueOnFail: () => run.continueOnFail ?? false,
		helpers: {
			httpRequestWithAuthentication: async function (type: string, options: IHttpRequestOptions) {
				if (type !== 'leadgateApi') throw new Error(`unexpected credential type ${type}`);
				const authenticated = await new LeadgateApi().authenticate(credentials, options);
				return httpRequest(authenticated);
			},
		},
	};
	return ctx as unknown as IExecuteFunctions;
}
