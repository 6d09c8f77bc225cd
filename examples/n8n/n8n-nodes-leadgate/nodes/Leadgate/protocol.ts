/**
 * Leadgate's claim API (src/intake/claims.rs, docs/openapi.json) as plain functions: what
 * an answer means for the workflow, and which error class a failed CRM call has. No n8n
 * here, so every rule is tested on its own.
 */

/** The classes of a failed CRM call (Leadgate's `ErrorClass` less `conflict`, which is
 * about the key, not the call; the claim API takes it too, and opens a review case). */
export const ERROR_CLASSES = ['not_sent', 'rate_limited', 'uncertain', 'validation', 'auth'] as const;
export type ErrorClass = (typeof ERROR_CLASSES)[number];

export interface HttpAnswer {
	statusCode: number;
	headers: Record<string, string | string[] | undefined>;
	body: unknown;
}

/** What a claim answered. `claimed` is the one case in which the workflow calls the CRM. */
export type ClaimOutcome =
	| 'claimed'
	| 'done'
	| 'in_flight'
	| 'needs_review'
	| 'key_reused'
	| 'connector_paused';

export interface ClaimResult {
	outcome: ClaimOutcome;
	/** Call the CRM now, then report with `lease_token`. */
	claimed: boolean;
	operation_id: string;
	lease_token?: string;
	lease_expires_at?: string;
	attempt?: number;
	/** `done`: `completed` or `failed_terminal`; `needs_review`: `needs_review`. */
	status?: string;
	crm_id?: string;
	last_error?: string;
	review_reason?: string;
	/** Seconds Leadgate asked to wait (`in_flight`, `connector_paused`). */
	retry_after?: number;
	message?: string;
}

export interface ReportResult {
	/** The report was applied; `false` when the lease did not hold (`lease_lost`, kept on
	 * Leadgate's timeline) or was never issued (`unknown_lease`). */
	reported: boolean;
	operation_id: string;
	status?: string;
	crm_id?: string | null;
	next_attempt_at?: string | null;
	review_reason?: string | null;
	error?: string;
	message?: string;
}

/** An answer the protocol does not expect (400, 401, 404, a database outage...): the node
 * fails with it. */
export class UnexpectedAnswer extends Error {
	constructor(
		readonly statusCode: number,
		readonly body: Record<string, unknown>,
	) {
		super(
			typeof (body.detail ?? body.message) === 'string'
				? `Leadgate answered ${statusCode} ${String(body.code ?? body.error ?? '')}: ${String(body.detail ?? body.message)}`
				: `Leadgate answered ${statusCode}`,
		);
	}
}

function object(body: unknown): Record<string, unknown> {
	if (typeof body === 'string') {
		try {
			return object(JSON.parse(body));
		} catch {
			return { message: body };
		}
	}
	return body !== null && typeof body === 'object' ? (body as Record<string, unknown>) : {};
}

function header(answer: HttpAnswer, name: string): string | undefined {
	const v = answer.headers[name] ?? answer.headers[name.toLowerCase()];
	return Array.isArray(v) ? v[0] : v;
}

function retryAfter(answer: HttpAnswer): number | undefined {
	const v = header(answer, 'retry-after');
	const n = v === undefined ? NaN : Number(v);
	return Number.isFinite(n) ? n : undefined;
}

const CLAIM_REFUSALS: Record<string, ClaimOutcome> = {
	in_flight: 'in_flight',
	needs_review: 'needs_review',
	key_reused: 'key_reused',
	connector_paused: 'connector_paused',
};

/** What a `POST /v1/operations` answer means. Throws [`UnexpectedAnswer`] for anything
 * but the protocol's answers. */
export function claimResult(answer: HttpAnswer): ClaimResult {
	const body = object(answer.body);
	const s = answer.statusCode;
	const str = (k: string) => (typeof body[k] === 'string' ? (body[k] as string) : undefined);
	if (s === 201) {
		return {
			outcome: 'claimed',
			claimed: true,
			operation_id: str('operation_id')!,
			lease_token: str('lease_token'),
			lease_expires_at: str('lease_expires_at'),
			attempt: typeof body.attempt === 'number' ? body.attempt : undefined,
		};
	}
	if (s === 200) {
		return {
			outcome: 'done',
			claimed: false,
			operation_id: str('operation_id')!,
			status: str('status'),
			crm_id: str('crm_id'),
			last_error: str('last_error'),
		};
	}
	// Problem details (RFC 9457): `code` and `detail`; `error` and `message` on older gateways.
	const code = str('code') ?? str('error');
	const outcome = code === undefined ? undefined : CLAIM_REFUSALS[code];
	if ((s === 409 || s === 422 || s === 503) && outcome !== undefined) {
		return {
			outcome,
			claimed: false,
			operation_id: str('operation_id')!,
			// A problem's `status` is its HTTP status; the operation's is `operation_status`
			// (a string `status` on gateways before problem details).
			status: str('operation_status') ?? str('status'),
			review_reason: str('review_reason'),
			retry_after: retryAfter(answer),
			message: str('detail') ?? str('message'),
		};
	}
	throw new UnexpectedAnswer(s, body);
}

/** What a `complete` or `fail` answer means. */
export function reportResult(answer: HttpAnswer): ReportResult {
	const body = object(answer.body);
	const s = answer.statusCode;
	if (s === 200) {
		return {
			reported: true,
			operation_id: body.operation_id as string,
			status: body.status as string,
			crm_id: (body.crm_id as string | null) ?? null,
			next_attempt_at: (body.next_attempt_at as string | null) ?? null,
			review_reason: (body.review_reason as string | null) ?? null,
		};
	}
	const code = body.code ?? body.error;
	if (s === 409 && (code === 'lease_lost' || code === 'unknown_lease')) {
		return {
			reported: false,
			operation_id: body.operation_id as string,
			error: code,
			message: (body.detail ?? body.message) as string,
		};
	}
	throw new UnexpectedAnswer(s, body);
}

/**
 * The class of a CRM answer that created nothing, from its HTTP status, as Leadgate's own
 * adapters classify a create's answer (examples/n8n/README.md): a refusal of the request
 * itself — 401/402/403, 404/405 (the address or method does not exist there) and 3xx →
 * `auth` (Leadgate pauses the connector, no lead fails for it); 408 → `uncertain` (a
 * timeout is an unknown outcome, never a refusal); 429 → `rate_limited`; other 4xx →
 * `validation` (that lead's data); everything else, 5xx included, → `uncertain` (the CRM
 * may have executed it).
 */
export function classifyHttpStatus(status: number): ErrorClass {
	if (!Number.isInteger(status) || status < 100 || status > 599) {
		throw new RangeError(`${status} is not an HTTP status`);
	}
	if ([401, 402, 403, 404, 405].includes(status) || (status >= 300 && status < 400)) {
		return 'auth';
	}
	if (status === 408) return 'uncertain';
	if (status === 429) return 'rate_limited';
	if (status >= 400 && status < 500) return 'validation';
	return 'uncertain';
}

/** Errors raised before anything reached the CRM (nothing can have been created). */
const NOT_SENT_CODES = new Set([
	'ECONNREFUSED',
	'ENOTFOUND',
	'EAI_AGAIN',
	'EHOSTUNREACH',
	'ENETUNREACH',
	'CERT_HAS_EXPIRED',
	'DEPTH_ZERO_SELF_SIGNED_CERT',
	'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
	'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * The class of a CRM call that got no answer, from the transport error's code (n8n's
 * `error.code`): refused or unresolvable before sending → `not_sent`; anything else (a
 * timeout, `ECONNABORTED`, a reset after sending) → `uncertain`, which goes to a person
 * instead of to a second create.
 */
export function classifyTransportError(code: string): ErrorClass {
	return NOT_SENT_CODES.has(code.trim().toUpperCase()) ? 'not_sent' : 'uncertain';
}

/**
 * Where the claim API of a credential's tenant is: `/v1` without a tenant (the default
 * tenant's), else `/v1/tenants/<slug>` (`/v1/tenants/<slug>/operations` is that tenant's
 * `/v1/operations`).
 */
export function apiRoot(tenant: unknown): string {
	const slug = String(tenant ?? '').trim();
	return slug === '' ? '/v1' : `/v1/tenants/${encodeURIComponent(slug)}`;
}
