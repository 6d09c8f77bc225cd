import {
	NodeApiError,
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type IHttpRequestOptions,
	type INodeExecutionData,
	type INodeType,
	type INodeTypeDescription,
	type JsonObject,
} from 'n8n-workflow';

import {
	ERROR_CLASSES,
	UnexpectedAnswer,
	apiRoot,
	claimResult,
	classifyHttpStatus,
	classifyTransportError,
	reportResult,
	type ErrorClass,
	type HttpAnswer,
} from './protocol';

const CLASS_NAMES: Record<ErrorClass, string> = {
	not_sent: 'Not Sent (nothing reached the CRM)',
	rate_limited: 'Rate Limited',
	uncertain: 'Uncertain (the CRM may have created it)',
	validation: 'Validation (the CRM refused the data)',
	auth: 'Auth (pauses the connector)',
};

const onOperation = (...operation: string[]) => ({ show: { operation } });

/**
 * Leadgate's claim API in one node: **Claim** before the CRM call (only `claimed` items
 * may call the CRM), then **Complete** with the CRM's id or **Fail** with the error class.
 * Leadgate owns the retries: a `rate_limited` or `not_sent` lead comes back through
 * `[claim_api] redeliver_url`, an `uncertain` one goes to a person.
 */
export class Leadgate implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Leadgate',
		name: 'leadgate',
		icon: { light: 'file:../../icons/leadgate.svg', dark: 'file:../../icons/leadgate.dark.svg' },
		group: ['transform'],
		version: 1,
		subtitle: '={{$parameter["operation"]}}',
		description: 'Claim a lead before the CRM call, then report complete or fail: one CRM result per lead',
		defaults: { name: 'Leadgate' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'leadgateApi', required: true }],
		properties: [
			{
				displayName: 'Operation',
				name: 'operation',
				type: 'options',
				noDataExpression: true,
				default: 'claim',
				options: [
					{
						name: 'Claim',
						value: 'claim',
						description:
							'Claim the lead\'s key; only an item with leadgate.claimed = true may call the CRM',
						action: 'Claim a lead',
					},
					{
						name: 'Complete',
						value: 'complete',
						description: 'Report that the CRM created the lead, with its ID',
						action: 'Complete a lead',
					},
					{
						name: 'Fail',
						value: 'fail',
						description: 'Report that the CRM call failed, with its error class',
						action: 'Fail a lead',
					},
				],
			},
			{
				displayName: 'Idempotency Key',
				name: 'idempotencyKey',
				type: 'string',
				required: true,
				default: '={{ $json.submission_id }}',
				description: "The lead's own key (a form's submission ID): the operation is &lt;[claim_api] source&gt;:&lt;key&gt;",
				displayOptions: onOperation('claim'),
			},
			{
				displayName: 'Lead',
				name: 'lead',
				type: 'json',
				default: '={{ JSON.stringify($json) }}',
				description: 'The lead as JSON. A repeat must send the same body, or Leadgate answers key_reused.',
				displayOptions: onOperation('claim'),
			},
			{
				displayName: 'Operation ID',
				name: 'operationId',
				type: 'string',
				required: true,
				default: '',
				placeholder: "={{ $('Claim').item.json.leadgate.operation_id }}",
				description: "The claim's leadgate.operation_id",
				displayOptions: onOperation('complete', 'fail'),
			},
			{
				displayName: 'Lease Token',
				name: 'leaseToken',
				type: 'string',
				typeOptions: { password: true },
				required: true,
				default: '',
				placeholder: "={{ $('Claim').item.json.leadgate.lease_token }}",
				description: "The claim's leadgate.lease_token",
				displayOptions: onOperation('complete', 'fail'),
			},
			{
				displayName: 'CRM ID',
				name: 'crmId',
				type: 'string',
				required: true,
				default: '',
				description: "The created entity's ID in the CRM",
				displayOptions: onOperation('complete'),
			},
			{
				displayName: 'Error Class',
				name: 'errorClass',
				type: 'options',
				default: 'fromHttpStatus',
				description: 'What Leadgate does next depends on it',
				options: [
					{
						name: 'From HTTP Status',
						value: 'fromHttpStatus',
						description:
							'The CRM answered without creating: 401/402/403/3xx auth, 408 not sent, 429 rate limited, other 4xx validation, else uncertain',
					},
					{
						name: 'From Transport Error Code',
						value: 'fromTransportError',
						description:
							'The CRM call got no answer: ECONNREFUSED, ENOTFOUND... not sent; a timeout or reset uncertain.',
					},
					...ERROR_CLASSES.map((c) => ({ name: CLASS_NAMES[c], value: c })),
				],
				displayOptions: onOperation('fail'),
			},
			{
				displayName: 'HTTP Status',
				name: 'httpStatus',
				type: 'number',
				default: 0,
				description: "The CRM's HTTP status",
				displayOptions: { show: { operation: ['fail'], errorClass: ['fromHttpStatus'] } },
			},
			{
				displayName: 'Transport Error Code',
				name: 'transportErrorCode',
				type: 'string',
				default: '={{ $json.error?.code }}',
				description: "The failed call's error code (ECONNREFUSED, ECONNABORTED, ECONNRESET...)",
				displayOptions: { show: { operation: ['fail'], errorClass: ['fromTransportError'] } },
			},
			{
				displayName: 'Error Message',
				name: 'errorMessage',
				type: 'string',
				default: '',
				description: 'What the CRM said; Leadgate strips markup and bounds the length',
				displayOptions: onOperation('fail'),
			},
			{
				displayName: 'Retry After (Seconds)',
				name: 'retryAfter',
				type: 'number',
				default: 0,
				description: "The CRM's Retry-After, if it sent one (0: none)",
				displayOptions: onOperation('fail'),
			},
		],
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const out: INodeExecutionData[] = [];
		const credentials = await this.getCredentials('leadgateApi');
		const base = String(credentials.url ?? '').replace(/\/+$/, '');
		if (!/^https?:\/\//.test(base)) {
			throw new NodeOperationError(this.getNode(), `The Leadgate URL "${base}" is not an http(s) URL`);
		}
		const call = async (path: string, headers: IDataObject, body: IDataObject): Promise<HttpAnswer> => {
			const options: IHttpRequestOptions = {
				method: 'POST',
				url: `${base}${path}`,
				headers: { 'Content-Type': 'application/json', ...headers },
				body,
				json: true,
				returnFullResponse: true,
				ignoreHttpStatusErrors: true,
			};
			// Only an unreachable Leadgate throws here; every answer is read below.
			return (await this.helpers.httpRequestWithAuthentication.call(this, 'leadgateApi', options)) as HttpAnswer;
		};
		// Fleet mode: a tenant's claim API is /v1/tenants/<slug>/operations.
		const api = apiRoot(credentials.tenant);
		const path = (id: string, verb: string) => `${api}/operations/${encodeURIComponent(id)}/${verb}`;

		for (let i = 0; i < items.length; i++) {
			try {
				const operation = this.getNodeParameter('operation', i) as string;
				let json: IDataObject;
				if (operation === 'claim') {
					const key = String(this.getNodeParameter('idempotencyKey', i, '') ?? '').trim();
					if (key === '') {
						throw new NodeOperationError(this.getNode(), 'The Idempotency Key is empty', { itemIndex: i });
					}
					const lead = parseLead(this.getNodeParameter('lead', i, '{}'));
					if (lead === undefined) {
						throw new NodeOperationError(this.getNode(), 'The Lead is not a JSON object', { itemIndex: i });
					}
					const result = claimResult(await call(`${api}/operations`, { 'Idempotency-Key': key }, lead));
					json = { ...items[i].json, leadgate: result as unknown as IDataObject };
				} else if (operation === 'complete' || operation === 'fail') {
					const id = required(this, 'operationId', i);
					const leaseToken = required(this, 'leaseToken', i);
					let body: IDataObject;
					if (operation === 'complete') {
						body = { crm_id: required(this, 'crmId', i), lease_token: leaseToken };
					} else {
						body = {
							class: errorClass(this, i),
							error: String(this.getNodeParameter('errorMessage', i, '') ?? ''),
							lease_token: leaseToken,
						};
						const retryAfter = Number(this.getNodeParameter('retryAfter', i, 0));
						if (Number.isInteger(retryAfter) && retryAfter > 0) body.retry_after = retryAfter;
					}
					const result = reportResult(await call(path(id, operation), {}, body));
					json = { leadgate: result as unknown as IDataObject };
				} else {
					throw new NodeOperationError(this.getNode(), `Unknown operation "${operation}"`, { itemIndex: i });
				}
				out.push({ json, pairedItem: { item: i } });
			} catch (error) {
				const failure =
					error instanceof UnexpectedAnswer
						? new NodeApiError(this.getNode(), error.body as JsonObject, {
								message: error.message,
								httpCode: String(error.statusCode),
								itemIndex: i,
							})
						: error;
				if (this.continueOnFail()) {
					out.push({ json: { error: (failure as Error).message }, pairedItem: { item: i } });
					continue;
				}
				throw failure;
			}
		}
		return [out];
	}
}

function required(ctx: IExecuteFunctions, name: string, i: number): string {
	const v = String(ctx.getNodeParameter(name, i, '') ?? '').trim();
	if (v === '') {
		throw new NodeOperationError(ctx.getNode(), `"${name}" is empty`, { itemIndex: i });
	}
	return v;
}

function parseLead(value: unknown): IDataObject | undefined {
	let v = value;
	if (typeof v === 'string') {
		try {
			v = JSON.parse(v);
		} catch {
			return undefined;
		}
	}
	return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as IDataObject) : undefined;
}

function errorClass(ctx: IExecuteFunctions, i: number): ErrorClass {
	const chosen = ctx.getNodeParameter('errorClass', i) as string;
	const cannot = (why: string) =>
		new NodeOperationError(ctx.getNode(), `Cannot classify the failure: ${why}`, { itemIndex: i });
	if (chosen === 'fromTransportError') {
		const code = String(ctx.getNodeParameter('transportErrorCode', i, '') ?? '');
		if (code.trim() === '') throw cannot('the transport error code is empty');
	}
	try {
		if (chosen === 'fromHttpStatus') {
			return classifyHttpStatus(Number(ctx.getNodeParameter('httpStatus', i)));
		}
		if (chosen === 'fromTransportError') {
			return classifyTransportError(String(ctx.getNodeParameter('transportErrorCode', i, '')));
		}
	} catch (e) {
		throw cannot((e as Error).message);
	}
	if ((ERROR_CLASSES as readonly string[]).includes(chosen)) return chosen as ErrorClass;
	throw new NodeOperationError(ctx.getNode(), `Unknown error class "${chosen}"`, { itemIndex: i });
}
