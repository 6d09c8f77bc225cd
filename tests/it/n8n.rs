//! The n8n example (examples/n8n/workflow.json) replayed against a running gateway and
//! the fake Bitrix24: the JSON is parsed, each HTTP Request node's method, URL, headers
//! and body are rendered from the workflow itself and sent, and the workflow's
//! connections decide what runs next. An expression this test does not know fails the
//! test, so the example cannot drift from what is tested.

use std::time::Duration;

use leadgate_fakes::bitrix24::Fault;
use serde_json::{json, Value};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{Gateway, CREATE};

fn workflow() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/n8n/workflow.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid workflow JSON")
}

fn node<'a>(wf: &'a Value, name: &str) -> &'a Value {
    wf["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

/// The node that output `index` of `from` leads to, if any.
fn next(wf: &Value, from: &str, index: usize) -> Option<String> {
    wf["connections"][from]["main"][index][0]["node"]
        .as_str()
        .map(str::to_owned)
}

/// What the expressions of one run can see.
struct Ctx<'a> {
    gw: &'a Gateway,
    webhook: Value,
    claim: Value,
    /// `$json` of the node being rendered.
    json: Value,
}

fn js(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

impl Ctx<'_> {
    fn eval(&self, expr: &str) -> String {
        let j = &self.json;
        match expr {
            "$env.LEADGATE_URL" => self.gw.base.clone(),
            "$env.LEADGATE_INTEGRATION_TOKEN" => {
                leadgate_testkit::gateway::INTEGRATION_TOKEN.to_owned()
            }
            "$env.BITRIX24_WEBHOOK_URL" => self.gw.fake.webhook_url(),
            "$json.body.submission_id" => j["body"]["submission_id"].as_str().unwrap().to_owned(),
            "JSON.stringify($json.body)" => js(&j["body"]),
            "JSON.stringify('Lead ' + $json.body.operation_id)" => js(&json!(format!(
                "Lead {}",
                j["body"]["operation_id"].as_str().unwrap()
            ))),
            "JSON.stringify($('Webhook').item.json.body.name)" => js(&self.webhook["body"]["name"]),
            "JSON.stringify($('Webhook').item.json.body.phone)" => {
                js(&self.webhook["body"]["phone"])
            }
            "JSON.stringify($json.body.operation_id)" => js(&j["body"]["operation_id"]),
            "encodeURIComponent($('Claim in Leadgate').item.json.body.operation_id)" => {
                leadgate_testkit::gateway::urlencode(
                    self.claim["body"]["operation_id"].as_str().unwrap(),
                )
            }
            "JSON.stringify(String($json.result))" => js(&json!(match &j["result"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })),
            "JSON.stringify($('Claim in Leadgate').item.json.body.lease_token)" => {
                js(&self.claim["body"]["lease_token"])
            }
            "JSON.stringify($json.error.message)" => js(&j["error"]["message"]),
            e if e.starts_with("JSON.stringify(({ 400: 'validation'") => {
                // The workflow's classification of a failed CRM call, as n8n computes it.
                let class = match j["error"]["httpCode"].as_u64() {
                    Some(400) => "validation",
                    Some(401 | 403) => "auth",
                    Some(429 | 503) => "rate_limited",
                    _ if j["error"]["code"] == "ECONNREFUSED" => "not_sent",
                    _ => "uncertain",
                };
                js(&json!(class))
            }
            other => panic!("examples/n8n uses an expression this test does not know: {other}"),
        }
    }

    /// Renders an n8n parameter: `=` starts an expression template with `{{ … }}` parts.
    fn render(&self, template: &str) -> String {
        let Some(mut rest) = template.strip_prefix('=') else {
            return template.to_owned();
        };
        let mut out = String::new();
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").expect("unclosed expression") + start;
            out.push_str(&self.eval(rest[start + 2..end].trim()));
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }
}

/// Sends one HTTP Request node. Returns n8n's item and which output it leaves by (0 =
/// success, 1 = the error output).
async fn http_node(ctx: &Ctx<'_>, node: &Value) -> (Value, usize) {
    assert_eq!(node["type"], "n8n-nodes-base.httpRequest");
    let p = &node["parameters"];
    let url = ctx.render(p["url"].as_str().unwrap());
    let method: reqwest::Method = p["method"].as_str().unwrap().parse().unwrap();
    // The CRM node allows 10 s; the test allows it 500 ms so a lost answer is quick.
    let timeout = p["options"]["timeout"]
        .as_u64()
        .map_or(Duration::from_secs(10), |ms| {
            Duration::from_millis(ms.min(500))
        });
    let mut req = reqwest::Client::new()
        .request(method, &url)
        .timeout(timeout);
    if p["sendHeaders"] == true {
        for h in p["headerParameters"]["parameters"].as_array().unwrap() {
            req = req.header(
                h["name"].as_str().unwrap(),
                ctx.render(h["value"].as_str().unwrap()),
            );
        }
    }
    if p["sendBody"] == true {
        let body = ctx.render(p["jsonBody"].as_str().unwrap());
        serde_json::from_str::<Value>(&body)
            .unwrap_or_else(|e| panic!("{} renders invalid JSON ({e}): {body}", node["name"]));
        req = req.header("content-type", "application/json").body(body);
    }
    let full = p["options"]["response"]["response"]["fullResponse"] == true;
    let never_error = p["options"]["response"]["response"]["neverError"] == true;
    match req.send().await {
        Ok(res) => {
            let status = res.status().as_u16();
            let body: Value = res.json().await.unwrap_or(Value::Null);
            if status >= 400 && !never_error {
                assert_eq!(
                    node["onError"], "continueErrorOutput",
                    "{} would stop the workflow",
                    node["name"]
                );
                return (
                    json!({"error": {"httpCode": status, "message": format!("HTTP {status}")}}),
                    1,
                );
            }
            (
                if full {
                    json!({"statusCode": status, "body": body})
                } else {
                    body
                },
                0,
            )
        }
        Err(e) => {
            assert_eq!(
                node["onError"], "continueErrorOutput",
                "{} would stop the workflow",
                node["name"]
            );
            let code = if e.is_connect() {
                "ECONNREFUSED"
            } else {
                "ECONNABORTED"
            };
            (
                json!({"error": {"code": code, "message": "timeout of the CRM call"}}),
                1,
            )
        }
    }
}

/// One execution of the workflow for a webhook body; returns the claim answer and the
/// name of the last node that ran.
async fn execute(gw: &Gateway, body: Value) -> (Value, String, Value) {
    let wf = workflow();
    let webhook = json!({"body": body});
    let mut ctx = Ctx {
        gw,
        webhook: webhook.clone(),
        claim: Value::Null,
        json: webhook,
    };
    let claim_node = next(&wf, "Webhook", 0).unwrap();
    let (claim, _) = http_node(&ctx, node(&wf, &claim_node)).await;
    ctx.claim = claim.clone();
    // The Switch node: the first rule whose status matches picks the output.
    let switch = next(&wf, &claim_node, 0).unwrap();
    let rules = node(&wf, &switch)["parameters"]["rules"]["values"]
        .as_array()
        .unwrap();
    let output = rules
        .iter()
        .position(|r| r["conditions"]["conditions"][0]["rightValue"] == claim["statusCode"])
        .unwrap_or(rules.len());
    let Some(crm_node) = next(&wf, &switch, output) else {
        return (claim, switch, Value::Null);
    };
    ctx.json = claim.clone();
    let (crm, out) = http_node(&ctx, node(&wf, &crm_node)).await;
    let report = next(&wf, &crm_node, out).unwrap();
    ctx.json = crm;
    let (reported, _) = http_node(&ctx, node(&wf, &report)).await;
    (claim, report, reported)
}

each_backend!(
    the_n8n_example_creates_once_and_replays_the_saved_result,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let wf = workflow();
        // Retry On Fail must stay off on the CRM node: Leadgate owns that retry.
        assert_eq!(node(&wf, "Create lead in Bitrix24")["retryOnFail"], false);
        let lead = json!({"submission_id": "n8n-1", "name": "Ivan", "phone": "+79991234567"});
        let (claim, last, done) = execute(&gw, lead.clone()).await;
        assert_eq!(claim["statusCode"], 201, "{claim}");
        assert_eq!(last, "Complete in Leadgate");
        assert_eq!(done["status"], "completed", "{done}");
        let created = gw.fake.entities();
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].fields["ORIGIN_ID"], "n8n:n8n-1");
        assert_eq!(done["crm_id"], created[0].id.to_string());
        // The workflow re-runs (a redelivery, a manual re-run): the saved result, no create.
        let (claim, last, _) = execute(&gw, lead).await;
        assert_eq!(claim["statusCode"], 200);
        assert_eq!(claim["body"]["crm_id"], done["crm_id"]);
        assert_eq!(last, "Claimed?", "the run stops at the switch");
        assert_eq!(gw.fake.calls(CREATE), 1);
        gw.stop().await;
    }
);

each_backend!(
    the_n8n_example_never_repeats_an_uncertain_create,
    |db| async move {
        let gw = Gateway::start(&db).await;
        // The CRM creates the lead, the answer never comes: the case n8n's own Retry On Fail
        // turns into a duplicate.
        gw.fake.push_fault(CREATE, Fault::LostAnswerHang, 1);
        let lead = json!({"submission_id": "n8n-2", "name": "Olga", "phone": "+79990001122"});
        let (_, last, reported) = execute(&gw, lead.clone()).await;
        assert_eq!(last, "Report failure to Leadgate");
        assert_eq!(reported["status"], "needs_review", "{reported}");
        let (claim, last, _) = execute(&gw, lead).await;
        assert_eq!(claim["statusCode"], 409, "{claim}");
        assert_eq!(claim["body"]["error"], "needs_review");
        assert_eq!(last, "Claimed?");
        assert_eq!(gw.fake.entities().len(), 1, "one lead in the CRM, not two");
        // A validation error: terminal, and the re-run gets the saved failure.
        gw.fake.push_fault(CREATE, Fault::Validation, 1);
        let bad = json!({"submission_id": "n8n-3", "name": "", "phone": ""});
        let (_, _, reported) = execute(&gw, bad.clone()).await;
        assert_eq!(reported["status"], "failed_terminal", "{reported}");
        let (claim, _, _) = execute(&gw, bad).await;
        assert_eq!(
            (
                claim["statusCode"].as_u64(),
                claim["body"]["status"].as_str()
            ),
            (Some(200), Some("failed_terminal"))
        );
        gw.stop().await;
    }
);
