//! `GET /api/openapi.json` of the real binary: public even when auth is on, OpenAPI 3.1, its
//! routes exactly the `### \`METHOD /path\`` headings of `docs/protocol.md`, every schema it
//! refers to defined, the stream's frames a `oneOf` whose journaled events are exactly the
//! protocol's kinds, and the three security schemes.

mod support;

use std::collections::BTreeSet;

use serde_json::Value;
use support::*;
use turnstream_protocol::EVENT_KINDS;

const SERVICE_KEY: &str = "svc-openapi-key-0001";
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// `(METHOD, path)` of every endpoint heading (`### \`GET /api/stream\``) of the protocol doc.
fn documented_routes() -> TestResult<BTreeSet<(String, String)>> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))?;
    let mut routes = BTreeSet::new();
    for line in doc.lines() {
        let Some(inner) = line
            .strip_prefix("### `")
            .and_then(|l| l.trim_end().strip_suffix('`'))
        else {
            continue;
        };
        let Some((method, path)) = inner.split_once(' ') else {
            continue;
        };
        if !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase()) {
            routes.insert((method.to_string(), path.to_string()));
        }
    }
    Ok(routes)
}

/// `(METHOD, path)` of every operation of the document.
fn described_routes(doc: &Value) -> TestResult<BTreeSet<(String, String)>> {
    let paths = doc["paths"].as_object().ok_or("no paths")?;
    let mut routes = BTreeSet::new();
    for (path, item) in paths {
        let item = item.as_object().ok_or("a path item is not an object")?;
        for method in item.keys().filter(|k| METHODS.contains(&k.as_str())) {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    Ok(routes)
}

/// Every `$ref` string in `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// The `kind` a variant of `EventBody` fixes, directly or in one of its `allOf` parts.
fn kind_of(variant: &Value) -> Option<&str> {
    if let Some(k) = variant["properties"]["kind"]["enum"][0].as_str() {
        return Some(k);
    }
    variant["allOf"].as_array()?.iter().find_map(kind_of)
}

#[tokio::test]
async fn the_served_description_matches_the_protocol_doc() -> TestResult {
    let server = TestServer::start(&["--service-key", SERVICE_KEY])?;
    // Auth is on: the API refuses a request without a credential...
    let (status, _) = server.get_json("/api/turns/turn_x").await?;
    assert_eq!(status, 401);
    // ...but its description is public.
    let res = server
        .http
        .get(format!("{}/api/openapi.json", server.url))
        .send()
        .await?;
    assert_eq!(res.status(), 200);
    let ct = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("application/json"), "{ct}");
    let doc: Value = serde_json::from_str(&res.text().await?)?;
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1.")),
        "openapi: {}",
        doc["openapi"]
    );

    let documented = documented_routes()?;
    assert!(documented.len() >= 10, "headings not found: {documented:?}");
    assert!(documented.contains(&("GET".to_string(), "/api/openapi.json".to_string())));
    let described = described_routes(&doc)?;
    assert_eq!(
        described, documented,
        "the OpenAPI routes differ from docs/protocol.md's endpoint headings"
    );

    // Self-contained: every schema referred to is defined.
    let schemas = doc["components"]["schemas"]
        .as_object()
        .ok_or("no schemas")?;
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .ok_or_else(|| format!("unexpected $ref {r}"))?;
        assert!(schemas.contains_key(name), "{r} is not defined");
    }

    // The stream's frames: a oneOf of the journaled event and the three control frames...
    let stream = &doc["paths"]["/api/stream"]["get"]["responses"]["200"]["content"];
    let frame_ref = stream["text/event-stream"]["schema"]["$ref"]
        .as_str()
        .ok_or_else(|| format!("no text/event-stream schema: {stream}"))?;
    let frame_name = frame_ref.trim_start_matches("#/components/schemas/");
    let frames: BTreeSet<&str> = schemas[frame_name]["oneOf"]
        .as_array()
        .ok_or("the stream's frame is not a oneOf")?
        .iter()
        .filter_map(|f| f["$ref"].as_str())
        .map(|r| r.trim_start_matches("#/components/schemas/"))
        .collect();
    let expected: BTreeSet<&str> = ["Event", "Snapshot", "ResyncRequired", "TokenExpired"].into();
    assert_eq!(frames, expected);
    // ...and the event's kinds are exactly the protocol's.
    let kinds: Vec<&str> = schemas["EventBody"]["oneOf"]
        .as_array()
        .ok_or("EventBody is not a oneOf")?
        .iter()
        .map(|v| kind_of(v).ok_or_else(|| format!("a variant without kind: {v}")))
        .collect::<Result<_, _>>()?;
    // An `input_requested` event's data says the request's kind (v1.2; `agent_call`, v1.3).
    let expected: Vec<&str> = EVENT_KINDS
        .iter()
        .flat_map(|k| match *k {
            "input_requested" => vec!["approval", "client_tool", "question", "agent_call"],
            k => vec![k],
        })
        .collect();
    let (mut kinds, mut expected) = (kinds, expected);
    kinds.sort_unstable();
    expected.sort_unstable();
    assert_eq!(kinds, expected);
    // v1.1 fields are described.
    assert!(schemas["Message"]["properties"].get("author").is_some());
    assert!(schemas["TurnInfo"]["properties"].get("usage").is_some());
    assert!(schemas["PostMessageRequest"]["properties"]
        .get("author")
        .is_some());
    // v1.3 fields are described.
    assert!(schemas["PostMessageRequest"]["properties"]
        .get("agent")
        .is_some());
    assert!(schemas["ClaimRequest"]["properties"]
        .get("agents")
        .is_some());
    assert!(schemas["ClaimedTurn"]["properties"]
        .get("called_by")
        .is_some());
    assert!(schemas["TurnInfo"]["properties"].get("agent").is_some());

    // Security: the three schemes, required on /api (except this document), not elsewhere.
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["bearer"]["bearerFormat"], "JWT");
    assert_eq!(schemes["access_token"]["in"], "query");
    assert_eq!(schemes["access_token"]["name"], "access_token");
    assert_eq!(schemes["service_key"]["scheme"], "bearer");
    for (method, path) in &described {
        let op = &doc["paths"][path][method.to_lowercase()];
        let security = op["security"]
            .as_array()
            .ok_or_else(|| format!("{method} {path} has no security"))?;
        let public = security
            .iter()
            .any(|s| s.as_object().is_some_and(|o| o.is_empty()));
        let protected = path.starts_with("/api/") && path != "/api/openapi.json";
        assert_eq!(public, !protected, "{method} {path}: security {security:?}");
        if protected {
            // Every error answer has the one error shape.
            let responses = op["responses"].as_object().ok_or("no responses")?;
            for (status, response) in responses.iter().filter(|(s, _)| s.as_str() >= "400") {
                let schema = &response["content"]["application/json"]["schema"]["$ref"];
                // The worker API's 409 adds `acked_seq` beside `error` (for `seq_gap`).
                let may_gap = status == "409" && path.starts_with("/api/worker/");
                // An answer's 409 adds the answer that was first (`input_already_given`, v1.2).
                let may_conflict = status == "409" && path.ends_with("/input");
                let ok = *schema == "#/components/schemas/ErrorBody"
                    || (may_gap && *schema == "#/components/schemas/SeqGapBody")
                    || (may_conflict && *schema == "#/components/schemas/InputConflictBody");
                assert!(ok, "{method} {path} {status}: {schema}");
            }
            assert!(responses.contains_key("401"), "{method} {path}: no 401");
        }
    }
    // `seq_gap` keeps the error shape, with the last accepted `seq` beside it.
    let gap = &doc["components"]["schemas"]["SeqGapBody"]["properties"];
    assert_eq!(gap["error"]["$ref"], "#/components/schemas/ErrorDetail");
    assert!(gap.get("acked_seq").is_some(), "{gap}");
    let conflict = &doc["components"]["schemas"]["InputConflictBody"]["properties"];
    assert_eq!(
        conflict["error"]["$ref"],
        "#/components/schemas/ErrorDetail"
    );
    assert!(conflict.get("answer").is_some(), "{conflict}");
    Ok(())
}
