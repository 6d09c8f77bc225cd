import type {
	Icon,
	ICredentialDataDecryptedObject,
	ICredentialTestRequest,
	ICredentialType,
	IHttpRequestOptions,
	INodeProperties,
} from 'n8n-workflow';

/**
 * Where Leadgate listens and its `[api] integration_token`; in fleet mode, the tenant
 * whose claim API the node calls and that tenant's integration token.
 */
export class LeadgateApi implements ICredentialType {
	name = 'leadgateApi';

	displayName = 'Leadgate API';

	icon: Icon = { light: 'file:../icons/leadgate.svg', dark: 'file:../icons/leadgate.dark.svg' };

	documentationUrl = 'https://github.com/leadgate/leadgate/tree/main/examples/n8n#community-node-n8n-nodes-leadgate';

	properties: INodeProperties[] = [
		{
			displayName: 'URL',
			name: 'url',
			type: 'string',
			default: 'http://localhost:8080',
			placeholder: 'http://leadgate:8080',
			description: 'Where Leadgate listens (its [server] listen, or the proxy in front of it)',
			required: true,
		},
		{
			displayName: 'Integration Token',
			name: 'integrationToken',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				"Leadgate's [api] integration_token (or its LEADGATE_INTEGRATION_TOKEN); without it the claim API answers 401",
			required: true,
		},
		{
			displayName: 'Tenant',
			name: 'tenant',
			type: 'string',
			default: '',
			placeholder: 'acme',
			description:
				"Fleet mode: the tenant's slug, with that tenant's [tenant.api] integration_token above; its claim API is /v1/tenants/<slug>/operations. Empty for a deployment without tenants (or its default tenant).",
		},
	];

	/** `Authorization: Bearer <integration token>` on every request. */
	async authenticate(
		credentials: ICredentialDataDecryptedObject,
		requestOptions: IHttpRequestOptions,
	): Promise<IHttpRequestOptions> {
		return {
			...requestOptions,
			headers: {
				...(requestOptions.headers ?? {}),
				Authorization: `Bearer ${credentials.integrationToken as string}`,
			},
		};
	}

	/**
	 * The integration token opens the reads too: `/metrics` (a tenant's
	 * `/v1/tenants/<slug>/metrics`) answers 200 only with it.
	 */
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.url.replace(/\\/+$/, "")}}',
			// `/v1/tenants/<slug>` first when a tenant is given (as the node's `tenantPrefix`).
			url: '={{($credentials.tenant ?? "").trim() === "" ? "" : "/v1/tenants/" + encodeURIComponent(($credentials.tenant ?? "").trim())}}/metrics',
			method: 'GET',
		},
	};
}
