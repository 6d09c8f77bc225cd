/**
 * The built node (dist/, what n8n loads; or the package installed from the `npm pack`
 * tarball, see ./built) against a real `leadgate serve` on SQLite with a fake Bitrix24,
 * started by scripts/live-gateway.sh (`make test-n8n-node`) or by tests/n8n_package.rs:
 * every step of the claim API's protocol, through the node's own parameters and
 * credential. The tests run in order; the last one pauses the connector.
 */
import { randomUUID } from 'node:crypto';

import { describe, expect, it } from 'vitest';

import { Leadgate, LeadgateApi, apiRoot, classifyHttpStatus, classifyTransportError } from './built';
import { context, gateway, type Run } from './context';

const node = new Leadgate();

async function run(r: Run) {
	const [out] = await node.execute.call(context(r));
	return out.map((item) => item.json as Record<string, any>);
}

async function claim(key: string, lead: object) {
	const [item] = await run({
		params: [{ operation: 'claim', idempotencyKey: key, lead: JSON.stringify(lead) }],
		items: [lead as any],
	});
	return item;
}

async function report(verb: 'complete' | 'fail', params: Record<string, unknown>) {
	const [item] = await run({ params: [{ operation: verb, ...params }] });
	return item.leadgate;
}

/** The operation as Leadgate's read API shows it. */
async function operation(id: string) {
	const res = await fetch(`${gateway.url}/v1/operations/${encodeURIComponent(id)}`, {
		headers: { Authorization: `Bearer ${gateway.token}` },
	});
	expect(res.status).toBe(200);
	return (await res.json()) as Record<string, any>;
}

const lead = (key: string) => ({ submission_id: key, name: 'Ivan', phone: '+79991234567' });
const fresh = (what: string) => `${what}-${randomUUID()}`;

describe('classification (as Leadgate classifies)', () => {
	it('maps HTTP statuses', () => {
		const table: [number, string][] = [
			[301, 'auth'], [302, 'auth'], [401, 'auth'], [402, 'auth'], [403, 'auth'],
			[404, 'auth'], [405, 'auth'], [408, 'uncertain'], [429, 'rate_limited'],
			[400, 'validation'], [409, 'validation'], [422, 'validation'],
			[500, 'uncertain'], [502, 'uncertain'], [503, 'uncertain'], [200, 'uncertain'],
		];
		for (const [status, cls] of table) expect([status, classifyHttpStatus(status)]).toEqual([status, cls]);
		expect(() => classifyHttpStatus(42)).toThrow(/not an HTTP status/);
	});

	it('maps transport errors: refused before sending is not_sent, the rest uncertain', () => {
		expect(classifyTransportError('ECONNREFUSED')).toBe('not_sent');
		expect(classifyTransportError('enotfound')).toBe('not_sent');
		expect(classifyTransportError('ECONNABORTED')).toBe('uncertain');
		expect(classifyTransportError('ECONNRESET')).toBe('uncertain');
		expect(classifyTransportError('ETIMEDOUT')).toBe('uncertain');
	});
});

/** An n8n template (`={{expression}}text`) as n8n expands it over `$credentials`. */
function expand(template: string, credentials: object): string {
	return template
		.replace(/^=/, '')
		.replace(/\{\{(.*?)\}\}/gs, (_, e: string) =>
			String(new Function('$credentials', `return (${e});`)(credentials)),
		);
}

describe('a tenant of a fleet (fleet mode)', () => {
	const credentials = { url: gateway.url, integrationToken: gateway.tenantToken, tenant: gateway.tenant };

	it("names the tenant's claim API", () => {
		expect(apiRoot('')).toBe('/v1');
		expect(apiRoot(undefined)).toBe('/v1');
		expect(apiRoot(' acme ')).toBe('/v1/tenants/acme');
	});

	it("claims and completes at the tenant's routes, under the tenant's key", async () => {
		const key = fresh('tenant');
		const claimed = (creds?: typeof credentials) =>
			run({ params: [{ operation: 'claim', idempotencyKey: key, lead: JSON.stringify(lead(key)) }], credentials: creds });
		const [first] = await claimed(credentials);
		const id = `${gateway.tenant}/${gateway.claimSource}:${key}`;
		expect(first.leadgate).toMatchObject({ outcome: 'claimed', claimed: true, operation_id: id, attempt: 1 });
		const [done] = await run({
			params: [{ operation: 'complete', operationId: id, leaseToken: first.leadgate.lease_token, crmId: '99' }],
			credentials,
		});
		expect(done.leadgate).toMatchObject({ reported: true, operation_id: id, status: 'completed', crm_id: '99' });
		const [again] = await claimed(credentials);
		expect(again.leadgate).toMatchObject({ outcome: 'done', claimed: false, crm_id: '99' });
		const read = await fetch(`${gateway.url}/v1/tenants/${gateway.tenant}/operations/${encodeURIComponent(id)}`, {
			headers: { Authorization: `Bearer ${gateway.tenantToken}` },
		});
		expect(read.status).toBe(200);
		expect(await read.json()).toMatchObject({ status: 'completed', crm_id: '99', attempts: 1 });
		// The same key at the default tenant is another lead of another portal.
		const [other] = await claimed();
		expect(other.leadgate).toMatchObject({ claimed: true, operation_id: `${gateway.claimSource}:${key}` });
	});

	it("the tenant's token opens only its tenant, and the credential test asks the tenant's figures", async () => {
		const outside = run({
			params: [{ operation: 'claim', idempotencyKey: fresh('outside'), lead: '{}' }],
			credentials: { url: gateway.url, integrationToken: gateway.tenantToken },
		});
		await expect(outside).rejects.toMatchObject({ httpCode: '401' });
		const test = new LeadgateApi().test.request;
		expect(expand(test.url as string, { tenant: '' })).toBe('/metrics');
		const url = expand(test.url as string, { tenant: ` ${gateway.tenant} ` });
		expect(url).toBe(`/v1/tenants/${gateway.tenant}/metrics`);
		const headers = (await new LeadgateApi().authenticate(credentials, { url: '' })).headers as any;
		const figures = await fetch(`${gateway.url}${url}`, { headers });
		expect(figures.status).toBe(200);
		expect(await figures.text()).toContain(`tenant="${gateway.tenant}"`);
		expect((await fetch(`${gateway.url}${url}`)).status).toBe(401);
		expect((await fetch(`${gateway.url}/metrics`, { headers })).status).toBe(401);
	});
});

describe('the node against a live gateway', () => {
	it('claims, completes, and a repeat gets the saved crm_id without a second claim', async () => {
		const key = fresh('done');
		const first = await claim(key, lead(key));
		// The input item goes on, with the claim beside it.
		expect(first.submission_id).toBe(key);
		expect(first.leadgate).toMatchObject({
			outcome: 'claimed',
			claimed: true,
			operation_id: `${gateway.claimSource}:${key}`,
			attempt: 1,
		});
		expect(first.leadgate.lease_token).toMatch(/.{8,}/);
		const id = first.leadgate.operation_id;
		expect((await operation(id)).status).toBe('in_progress');

		const done = await report('complete', { operationId: id, leaseToken: first.leadgate.lease_token, crmId: '4711' });
		expect(done).toMatchObject({ reported: true, operation_id: id, status: 'completed', crm_id: '4711' });

		const again = await claim(key, lead(key));
		expect(again.leadgate).toMatchObject({ outcome: 'done', claimed: false, status: 'completed', crm_id: '4711' });
		expect((await operation(id)).attempts).toBe(1);

		// The same report again (n8n re-ran the node) is idempotent by lease token.
		const again2 = await report('complete', { operationId: id, leaseToken: first.leadgate.lease_token, crmId: '4711' });
		expect(again2).toMatchObject({ reported: true, status: 'completed', crm_id: '4711' });
		const op = await operation(id);
		expect([op.crm_id, op.attempts]).toEqual(['4711', 1]);
	});

	it('a claim in flight is refused with Retry-After, and the same key with another body is key_reused', async () => {
		const key = fresh('busy');
		const first = await claim(key, lead(key));
		expect(first.leadgate.claimed).toBe(true);
		const second = await claim(key, lead(key));
		expect(second.leadgate).toMatchObject({ outcome: 'in_flight', claimed: false });
		expect(second.leadgate.retry_after).toBeGreaterThan(0);
		const other = await claim(key, { ...lead(key), name: 'Petr' });
		expect(other.leadgate).toMatchObject({ outcome: 'key_reused', claimed: false });
	});

	it('fail: validation ends the lead, rate_limited from a 429 is due again, uncertain goes to review', async () => {
		const v = fresh('validation');
		const c1 = (await claim(v, lead(v))).leadgate;
		const r1 = await report('fail', {
			operationId: c1.operation_id, leaseToken: c1.lease_token,
			errorClass: 'validation', errorMessage: 'PHONE is invalid', retryAfter: 0,
		});
		expect(r1).toMatchObject({ reported: true, status: 'failed_terminal' });
		const again = (await claim(v, lead(v))).leadgate;
		expect(again).toMatchObject({ outcome: 'done', status: 'failed_terminal' });
		expect(again.last_error).toContain('PHONE is invalid');

		const rl = fresh('rate');
		const c2 = (await claim(rl, lead(rl))).leadgate;
		const r2 = await report('fail', {
			operationId: c2.operation_id, leaseToken: c2.lease_token,
			errorClass: 'fromHttpStatus', httpStatus: 429, errorMessage: 'QUERY_LIMIT_EXCEEDED', retryAfter: 30,
		});
		expect(r2).toMatchObject({ reported: true, status: 'received' });
		expect(Date.parse(r2.next_attempt_at) - Date.now()).toBeGreaterThan(20_000);
		expect((await claim(rl, lead(rl))).leadgate.outcome).toBe('in_flight');

		const u = fresh('uncertain');
		const c3 = (await claim(u, lead(u))).leadgate;
		const r3 = await report('fail', {
			operationId: c3.operation_id, leaseToken: c3.lease_token,
			errorClass: 'fromTransportError', transportErrorCode: 'ECONNABORTED', errorMessage: 'timeout of 10000ms exceeded',
		});
		expect(r3).toMatchObject({ reported: true, status: 'needs_review', review_reason: 'uncertain_outcome' });
		expect((await claim(u, lead(u))).leadgate).toMatchObject({
			outcome: 'needs_review', status: 'needs_review', review_reason: 'uncertain_outcome',
		});
	});

	it('a lease token that was never issued records nothing', async () => {
		const key = fresh('forged');
		const c = (await claim(key, lead(key))).leadgate;
		const r = await report('complete', { operationId: c.operation_id, leaseToken: 'not-a-token', crmId: '1' });
		expect(r).toMatchObject({ reported: false, error: 'unknown_lease' });
		expect((await operation(c.operation_id)).status).toBe('in_progress');
	});

	it('bad input fails the node with a clear error; continueOnFail keeps the item', async () => {
		await expect(run({ params: [{ operation: 'claim', idempotencyKey: '  ', lead: '{}' }] })).rejects.toThrow(
			/Idempotency Key is empty/,
		);
		await expect(run({ params: [{ operation: 'claim', idempotencyKey: 'k', lead: '[1,2]' }] })).rejects.toThrow(
			/not a JSON object/,
		);
		// Leadgate's own refusal (a key longer than an operation id may be) is a NodeApiError.
		const refused = run({ params: [{ operation: 'claim', idempotencyKey: 'x'.repeat(300), lead: '{}' }] });
		await expect(refused).rejects.toMatchObject({ httpCode: '400' });
		await expect(refused).rejects.toThrow(/invalid_key/);
		const kept = await run({
			params: [{ operation: 'complete', operationId: 'n8n:nobody', leaseToken: 't', crmId: '1' }],
			continueOnFail: true,
		});
		expect(kept[0].error).toMatch(/404 not_found/);
	});

	it('a wrong integration token is a 401 NodeApiError, and the credential test request needs the token', async () => {
		const wrong = run({
			params: [{ operation: 'claim', idempotencyKey: fresh('auth'), lead: '{}' }],
			credentials: { url: gateway.url, integrationToken: 'wrong' },
		});
		await expect(wrong).rejects.toMatchObject({ httpCode: '401' });
		const cred = new LeadgateApi();
		expect(cred.test.request).toMatchObject({ method: 'GET' });
		const url = expand(cred.test.request.url as string, { url: gateway.url, integrationToken: gateway.token });
		expect(url).toBe('/metrics');
		const withToken = await fetch(`${gateway.url}${url}`, {
			headers: (await cred.authenticate({ integrationToken: gateway.token }, { url: '' })).headers as any,
		});
		expect(withToken.status).toBe(200);
		expect((await fetch(`${gateway.url}${url}`)).status).toBe(401);
	});

	// Last: it pauses the claim API's connector for the rest of this gateway's life.
	it('fail with auth pauses the connector: every claim then answers connector_paused', async () => {
		const key = fresh('paused');
		const c = (await claim(key, lead(key))).leadgate;
		const r = await report('fail', {
			operationId: c.operation_id, leaseToken: c.lease_token,
			errorClass: 'fromHttpStatus', httpStatus: 401, errorMessage: 'expired_token',
		});
		expect(r.reported).toBe(true);
		const next = fresh('after-pause');
		const refused = (await claim(next, lead(next))).leadgate;
		expect(refused).toMatchObject({ outcome: 'connector_paused', claimed: false, retry_after: 60 });
	});
});
