//! Bad input at the HTTP face of the real binary: `mcp-supervisor serve --http` in front of the
//! fault server gets malformed JSON, JSON that is not JSON-RPC, wrong methods and parameter types,
//! batches, a 20 MiB body, wrong or missing headers, bogus sessions, non-UTF-8 bytes, and a seeded
//! stream of mutated `initialize` / `tools/call` bodies, and a second one of mutated tool calls
//! with a live session's headers (so they reach the HTTP face's session path, `mcp_http.rs`, and
//! the message face behind it). Every request must get a whole 2xx or 4xx
//! response (never a 5xx, a dropped connection or a hang), the process must stay alive after each,
//! it must log no panic, and afterwards a real MCP client must still get a correct `fault__echo`
//! answer. Each test prints how many cases it tried.

mod bad_input_support;

use std::time::Duration;

use bad_input_support::*;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

/// How long one request may take before it counts as a hang.
const LIMIT: Duration = Duration::from_secs(20);
/// The seed of the randomized test (change it to explore; failures print it).
const SEED: u64 = 0x5EED_BAD1_4B07_0001;
/// How many mutated requests the randomized test sends.
const MUTATED: usize = 300;
/// How many mutated tool calls the session test sends, all with a live session's headers.
const MUTATED_CALLS: usize = 400;

const JSON: &[u8] = b"application/json";
const ACCEPT_BOTH: &[u8] = b"application/json, text/event-stream";
const PROTOCOL: &str = "2025-06-18";

fn initialize_body(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "bad-input-test", "version": "0"}
    }})
}

fn call_body(id: Value, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
}

/// A live MCP session on the proxy, opened with raw requests.
struct Session {
    id: String,
    protocol: String,
}

async fn open_session(port: u16) -> Session {
    let bytes = request_bytes(
        "POST",
        "/mcp",
        port,
        &[("Content-Type", JSON), ("Accept", ACCEPT_BOTH)],
        initialize_body(json!(0)).to_string().as_bytes(),
        false,
    );
    let reply = exchange(port, bytes, LIMIT).await.expect("initialize");
    assert_eq!(reply.status, 200, "initialize: {}", reply.text());
    let id = reply
        .header("mcp-session-id")
        .expect("initialize returns Mcp-Session-Id")
        .to_owned();
    let protocol = reply
        .messages()
        .iter()
        .find_map(|m| m["result"]["protocolVersion"].as_str().map(str::to_owned))
        .unwrap_or_else(|| PROTOCOL.to_owned());
    let session = Session { id, protocol };
    let bytes = request_bytes(
        "POST",
        "/mcp",
        port,
        &session.headers(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
            .to_string()
            .as_bytes(),
        false,
    );
    let reply = exchange(port, bytes, LIMIT)
        .await
        .expect("notifications/initialized");
    assert_eq!(reply.status, 202, "initialized: {}", reply.text());
    session
}

impl Session {
    fn headers(&self) -> Vec<(&'static str, &[u8])> {
        vec![
            ("Content-Type", JSON),
            ("Accept", ACCEPT_BOTH),
            ("Mcp-Session-Id", self.id.as_bytes()),
            ("MCP-Protocol-Version", self.protocol.as_bytes()),
        ]
    }
}

/// What one case must get besides "a whole 2xx or 4xx response".
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Any 2xx or 4xx.
    Any,
    /// Exactly this status.
    Status(u16),
    /// Any 4xx.
    ClientError,
    /// 200 with a JSON-RPC answer (a result or an error) to the request with this id.
    Answer(u64),
    /// 200 with a JSON-RPC error answer to the request with this id.
    ErrorAnswer(u64),
    /// 400 with a JSON-RPC error of this code and a null id (a body that is not a message).
    Rejected(i64),
    /// Any 2xx or 4xx, or the server closing the connection without a response (for a request
    /// that the client itself breaks off).
    AnyOrClosed,
}

struct Case {
    name: String,
    bytes: Vec<u8>,
    expect: Expect,
    /// Shut the write side down after sending (a client that breaks off).
    half_close: bool,
}

fn case(name: impl Into<String>, bytes: Vec<u8>, expect: Expect) -> Case {
    Case {
        name: name.into(),
        bytes,
        expect,
        half_close: false,
    }
}

/// Checks one reply; `Err` says what is wrong.
fn judge(expect: Expect, result: &Result<Reply, String>) -> Result<(), String> {
    let reply = match (result, expect) {
        (Err(e), Expect::AnyOrClosed) if e.starts_with("no response at all") => return Ok(()),
        (Err(e), _) => return Err(e.clone()),
        (Ok(reply), _) => reply,
    };
    let status = reply.status;
    if !(200..300).contains(&status) && !(400..500).contains(&status) {
        return Err(format!("status {status}: {}", reply.text()));
    }
    let answered = |id: u64, error_only: bool| {
        reply.messages().iter().any(|m| {
            m["id"] == json!(id)
                && (m.get("error").is_some() || (!error_only && m.get("result").is_some()))
        })
    };
    let ok = match expect {
        Expect::Any | Expect::AnyOrClosed => true,
        Expect::Status(s) => status == s,
        Expect::ClientError => (400..500).contains(&status),
        Expect::Answer(id) => status == 200 && answered(id, false),
        Expect::ErrorAnswer(id) => status == 200 && answered(id, true),
        Expect::Rejected(code) => {
            status == 400
                && reply.messages().iter().any(|m| {
                    m["id"].is_null()
                        && m["error"]["code"] == json!(code)
                        && m["error"]["message"]
                            .as_str()
                            .is_some_and(|t| !t.is_empty())
                })
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected {expect:?}, got status {status}: {}",
            reply.text().chars().take(400).collect::<String>()
        ))
    }
}

/// A real MCP client (rmcp's streamable HTTP transport) must still get a correct answer.
async fn assert_a_real_client_still_works(proxy: &mut Proxy) {
    assert!(proxy.alive(), "the proxy is still running");
    let transport = StreamableHttpClientTransport::from_uri(proxy.url("/mcp"));
    let client = tokio::time::timeout(LIMIT, ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("a real client initializes");
    let arguments = json!({"message": "still here"});
    let result = tokio::time::timeout(
        LIMIT,
        client.call_tool(
            CallToolRequestParams::new("fault__echo")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        ),
    )
    .await
    .expect("fault__echo in time")
    .expect("fault__echo answers");
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("still here"));
    assert_ne!(result.is_error, Some(true));
    let _ = client.cancel().await;
    let healthz = reqwest::get(proxy.url("/healthz")).await.expect("healthz");
    assert_eq!(healthz.status().as_u16(), 200, "still healthy");
}

fn assert_no_panic_logged(proxy: &Proxy) {
    let stderr = proxy.stderr();
    assert!(
        !stderr.contains("panicked"),
        "the proxy logged a panic:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_bad_requests_get_a_4xx_or_an_error_answer_and_the_proxy_keeps_serving() {
    let mut proxy = Proxy::start("fixed").await;
    let port = proxy.port;
    let session = open_session(port).await;
    let post = |headers: &[(&str, &[u8])], body: &[u8]| {
        request_bytes("POST", "/mcp", port, headers, body, false)
    };
    let std_headers: &[(&str, &[u8])] = &[("Content-Type", JSON), ("Accept", ACCEPT_BOTH)];
    let init = initialize_body(json!(1)).to_string();
    let mut cases = Vec::new();

    // --- Bodies that are not JSON-RPC, with no session ---
    for (name, body) in [
        (
            "malformed JSON",
            &br#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"#[..],
        ),
        ("empty body", b""),
        ("whitespace only", b"  \r\n\t "),
        ("trailing garbage", br#"{"jsonrpc":"2.0","id":1,"method":"ping"} }}}"#),
        ("JSON object, not JSON-RPC", br#"{"hello": "world"}"#),
        ("JSON number", b"42"),
        ("JSON string", br#""initialize""#),
        ("JSON null", b"null"),
        ("JSON true", b"true"),
        ("empty object", b"{}"),
        ("empty batch", b"[]"),
        (
            "jsonrpc 1.0",
            br#"{"jsonrpc":"1.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#,
        ),
        (
            "method is a number",
            br#"{"jsonrpc":"2.0","id":1,"method":42}"#,
        ),
        (
            "id is an object",
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#,
        ),
        (
            "id is a float",
            br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
        ),
        (
            "initialize params is a string",
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":"x"}"#,
        ),
        (
            "initialize without params",
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
        ),
        (
            "initialize protocolVersion is a number",
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#,
        ),
        (
            "initialize capabilities is an array",
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":[],"clientInfo":null}}"#,
        ),
        (
            "unknown method without a session",
            br#"{"jsonrpc":"2.0","id":1,"method":"no/such/method","params":{}}"#,
        ),
        (
            "tools/call without a session",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fault__echo","arguments":{"message":"x"}}}"#,
        ),
        ("UTF-8 BOM before JSON", b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"),
        (
            "non-UTF-8 bytes in a string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initial\xff\xfeize\"}",
        ),
        ("non-UTF-8 bytes only", b"\x80\x81\xfe\xff\xc3\x28\xa0\xa1"),
        ("NUL bytes", b"\0\0\0\0"),
        (
            "lone surrogate escape",
            br#"{"jsonrpc":"2.0","id":1,"method":"\ud800"}"#,
        ),
    ] {
        cases.push(case(name, post(std_headers, body), Expect::ClientError));
    }
    // A body with the right media type that is not JSON, or not a JSON-RPC message, is a 400
    // with the JSON-RPC error that says which (not rmcp's 415, which blames the media type).
    for (name, body, code) in [
        (
            "not JSON: 400 parse error",
            &b"{\"jsonrpc\": \"2.0\", \"id\": 1,"[..],
            -32700,
        ),
        ("not JSON at all: 400 parse error", b"hello", -32700),
        (
            "JSON, not a message: 400 invalid request",
            br#"{"hello": "world"}"#,
            -32600,
        ),
        (
            "a batch: 400 invalid request",
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            -32600,
        ),
    ] {
        cases.push(case(name, post(std_headers, body), Expect::Rejected(code)));
    }
    cases.push(case(
        "batch of two initializes",
        post(std_headers, format!("[{init},{init}]").as_bytes()),
        Expect::ClientError,
    ));
    cases.push(case(
        "100 000 nested arrays (under the size limit)",
        post(std_headers, "[".repeat(100_000).as_bytes()),
        Expect::ClientError,
    ));
    cases.push(case(
        "100 000 nested objects in params",
        post(
            std_headers,
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}"#,
                r#"{"a":"#.repeat(100_000)
            )
            .as_bytes(),
        ),
        Expect::ClientError,
    ));

    // --- Size ---
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"{}","version":"0"}}}}}}"#,
        "a".repeat(20 * 1024 * 1024)
    );
    cases.push(case(
        "20 MiB initialize",
        post(std_headers, huge.as_bytes()),
        Expect::Status(413),
    ));
    cases.push(case(
        "20 MiB of nested arrays",
        post(std_headers, "[".repeat(20 * 1024 * 1024).as_bytes()),
        Expect::Status(413),
    ));
    cases.push(case(
        "20 MiB in a session's tools/call",
        post(
            &session.headers(),
            call_body(
                json!(5),
                "fault__echo",
                json!({"message": "b".repeat(20 * 1024 * 1024)}),
            )
            .to_string()
            .as_bytes(),
        ),
        Expect::Status(413),
    ));

    // --- Headers ---
    for (name, content_type) in [
        ("Content-Type text/plain", &b"text/plain"[..]),
        ("Content-Type application/xml", b"application/xml"),
        ("Content-Type application/json-seq", b"application/json-seq"),
        (
            "Content-Type with non-ASCII bytes",
            b"application/\xff\xfejson",
        ),
        ("empty Content-Type", b""),
    ] {
        cases.push(case(
            name,
            post(
                &[("Content-Type", content_type), ("Accept", ACCEPT_BOTH)],
                init.as_bytes(),
            ),
            Expect::Status(415),
        ));
    }
    cases.push(case(
        "no Content-Type",
        post(&[("Accept", ACCEPT_BOTH)], init.as_bytes()),
        Expect::Status(415),
    ));
    for (name, accept) in [
        ("Accept application/json only", &b"application/json"[..]),
        ("Accept text/event-stream only", b"text/event-stream"),
        ("Accept */*", b"*/*"),
        (
            "Accept with non-ASCII bytes",
            b"application/json, text/\xffevent-stream",
        ),
    ] {
        cases.push(case(
            name,
            post(
                &[("Content-Type", JSON), ("Accept", accept)],
                init.as_bytes(),
            ),
            Expect::Status(406),
        ));
    }
    cases.push(case(
        "no Accept header",
        post(&[("Content-Type", JSON)], init.as_bytes()),
        Expect::Status(406),
    ));
    let call = call_body(json!(7), "fault__echo", json!({"message": "x"})).to_string();
    let long_session = "s".repeat(8 * 1024);
    for (name, session_id) in [
        ("bogus Mcp-Session-Id", &b"00000000-not-a-session"[..]),
        ("empty Mcp-Session-Id", b""),
        ("8 KiB Mcp-Session-Id", long_session.as_bytes()),
        ("non-ASCII Mcp-Session-Id", b"\xff\xfe\xfd"),
    ] {
        cases.push(case(
            name,
            post(
                &[
                    ("Content-Type", JSON),
                    ("Accept", ACCEPT_BOTH),
                    ("Mcp-Session-Id", session_id),
                    ("MCP-Protocol-Version", PROTOCOL.as_bytes()),
                ],
                call.as_bytes(),
            ),
            Expect::ClientError,
        ));
    }
    for (name, version) in [
        ("unknown MCP-Protocol-Version", &b"1999-01-01"[..]),
        ("garbage MCP-Protocol-Version", b"\xff latest"),
    ] {
        cases.push(case(
            name,
            post(
                &[
                    ("Content-Type", JSON),
                    ("Accept", ACCEPT_BOTH),
                    ("Mcp-Session-Id", session.id.as_bytes()),
                    ("MCP-Protocol-Version", version),
                ],
                call.as_bytes(),
            ),
            Expect::ClientError,
        ));
    }
    cases.push(case(
        "foreign Host",
        {
            let mut bytes = b"POST /mcp HTTP/1.1\r\nHost: evil.example\r\n".to_vec();
            bytes.extend_from_slice(
                format!(
                    "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{init}",
                    init.len()
                )
                .as_bytes(),
            );
            bytes
        },
        Expect::Status(403),
    ));
    cases.push(case(
        "foreign Origin",
        post(
            &[
                ("Content-Type", JSON),
                ("Accept", ACCEPT_BOTH),
                ("Origin", b"https://evil.example"),
            ],
            init.as_bytes(),
        ),
        Expect::Status(403),
    ));
    cases.push(case(
        "a 64 KiB header",
        post(
            &[
                ("Content-Type", JSON),
                ("Accept", ACCEPT_BOTH),
                ("X-Filler", "f".repeat(64 * 1024).as_bytes()),
            ],
            init.as_bytes(),
        ),
        // Within hyper's header limits: an ordinary request.
        Expect::Any,
    ));

    // --- Framing: a body that cannot be read is the client's fault (400, not 500) ---
    cases.push(case(
        "malformed chunked body",
        request_bytes(
            "POST",
            "/mcp",
            port,
            &[
                ("Content-Type", JSON),
                ("Accept", ACCEPT_BOTH),
                ("Transfer-Encoding", b"chunked"),
            ],
            b"zz\r\n{\"jsonrpc\"\r\n0\r\n\r\n",
            true,
        ),
        Expect::Status(400),
    ));
    cases.push(case(
        "chunked body with an overflowing chunk size",
        request_bytes(
            "POST",
            "/mcp",
            port,
            &[
                ("Content-Type", JSON),
                ("Accept", ACCEPT_BOTH),
                ("Transfer-Encoding", b"chunked"),
            ],
            b"5\r\n{\"jso\r\nFFFFFFFFFFFFFFFFFFFF\r\n",
            true,
        ),
        Expect::Status(400),
    ));

    let cut = request_bytes(
        "POST",
        "/mcp",
        port,
        &[
            ("Content-Type", JSON),
            ("Accept", ACCEPT_BOTH),
            ("Content-Length", b"1000"),
        ],
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"#,
        true,
    );
    cases.push(Case {
        half_close: true,
        ..case(
            "body shorter than Content-Length, then the client stops sending",
            cut,
            Expect::AnyOrClosed,
        )
    });

    // --- Other methods on /mcp ---
    cases.push(case(
        "PUT /mcp",
        request_bytes("PUT", "/mcp", port, std_headers, init.as_bytes(), false),
        Expect::ClientError,
    ));
    cases.push(case(
        "PATCH /mcp",
        request_bytes("PATCH", "/mcp", port, std_headers, b"{}", false),
        Expect::ClientError,
    ));
    cases.push(case(
        "GET /mcp without a session",
        request_bytes(
            "GET",
            "/mcp",
            port,
            &[("Accept", b"text/event-stream")],
            b"",
            false,
        ),
        Expect::ClientError,
    ));
    cases.push(case(
        "GET /mcp with a bogus session",
        request_bytes(
            "GET",
            "/mcp",
            port,
            &[
                ("Accept", b"text/event-stream"),
                ("Mcp-Session-Id", b"bogus"),
                ("MCP-Protocol-Version", PROTOCOL.as_bytes()),
            ],
            b"",
            false,
        ),
        Expect::ClientError,
    ));
    cases.push(case(
        "DELETE /mcp with a bogus session",
        request_bytes(
            "DELETE",
            "/mcp",
            port,
            &[
                ("Mcp-Session-Id", b"bogus"),
                ("MCP-Protocol-Version", PROTOCOL.as_bytes()),
            ],
            b"",
            false,
        ),
        // No such session to end.
        Expect::Status(404),
    ));
    cases.push(case(
        "DELETE /mcp without a session",
        request_bytes("DELETE", "/mcp", port, &[], b"", false),
        Expect::ClientError,
    ));

    // --- Inside a live session: wrong methods and parameter types get JSON-RPC errors ---
    let in_session: Vec<(&str, Value, Expect)> = vec![
        (
            "unknown method",
            json!({"jsonrpc":"2.0","id":101,"method":"no/such/method","params":{}}),
            Expect::ErrorAnswer(101),
        ),
        (
            "tools/call name is a number",
            json!({"jsonrpc":"2.0","id":102,"method":"tools/call","params":{"name":5}}),
            Expect::Any,
        ),
        (
            "tools/call arguments is a string",
            json!({"jsonrpc":"2.0","id":103,"method":"tools/call","params":{"name":"fault__echo","arguments":"x"}}),
            Expect::Any,
        ),
        (
            "tools/call without params",
            json!({"jsonrpc":"2.0","id":104,"method":"tools/call"}),
            Expect::Any,
        ),
        (
            "tools/call of an unknown tool",
            call_body(json!(105), "no_such_tool", json!({})),
            Expect::Answer(105),
        ),
        (
            "tools/call with the argument missing",
            call_body(json!(106), "fault__echo", json!({})),
            Expect::Answer(106),
        ),
        (
            "tools/call with the argument of the wrong type",
            call_body(json!(107), "fault__echo", json!({"message": [1, 2]})),
            Expect::Answer(107),
        ),
        (
            "tools/call with an empty name",
            call_body(json!(108), "", json!({})),
            Expect::Answer(108),
        ),
        (
            "tools/list cursor is an object",
            json!({"jsonrpc":"2.0","id":109,"method":"tools/list","params":{"cursor":{"a":1}}}),
            Expect::Any,
        ),
        (
            "resources/read uri is a number",
            json!({"jsonrpc":"2.0","id":110,"method":"resources/read","params":{"uri":5}}),
            Expect::Any,
        ),
        (
            "resources/read of an unknown uri",
            json!({"jsonrpc":"2.0","id":111,"method":"resources/read","params":{"uri":"nope://x"}}),
            Expect::Answer(111),
        ),
        (
            "prompts/get of an unknown prompt",
            json!({"jsonrpc":"2.0","id":112,"method":"prompts/get","params":{"name":"nope"}}),
            Expect::Answer(112),
        ),
        (
            "logging/setLevel to a bogus level",
            json!({"jsonrpc":"2.0","id":113,"method":"logging/setLevel","params":{"level":"loud"}}),
            Expect::Any,
        ),
        (
            "completion/complete with a bogus ref",
            json!({"jsonrpc":"2.0","id":114,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"nope"},"argument":{"name":"a","value":"b"}}}),
            Expect::Answer(114),
        ),
        (
            "initialize again in the session",
            initialize_body(json!(115)),
            Expect::Any,
        ),
        (
            "batch in a session",
            json!([
                call_body(json!(116), "fault__echo", json!({"message": "a"})),
                call_body(json!(117), "fault__echo", json!({"message": "b"}))
            ]),
            Expect::ClientError,
        ),
        (
            "a response the server never asked for",
            json!({"jsonrpc":"2.0","id":999,"result":{}}),
            Expect::Any,
        ),
        (
            "an error response the server never asked for",
            json!({"jsonrpc":"2.0","id":998,"error":{"code":-1,"message":"x"}}),
            Expect::Any,
        ),
        (
            "an unknown notification",
            json!({"jsonrpc":"2.0","method":"notifications/no_such_thing","params":{"x":1}}),
            Expect::Any,
        ),
        (
            "cancel a request that does not exist",
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"nope"}}),
            Expect::Any,
        ),
        (
            "progress for a token that does not exist",
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":"many"}}),
            Expect::Any,
        ),
        (
            "a correct echo between the bad requests",
            call_body(json!(118), "fault__echo", json!({"message": "in between"})),
            Expect::Answer(118),
        ),
    ];
    for (name, body, expect) in in_session {
        cases.push(case(
            format!("session: {name}"),
            post(&session.headers(), body.to_string().as_bytes()),
            expect,
        ));
    }

    let total = cases.len();
    let mut failures = Vec::new();
    let mut table = Vec::new();
    for case in cases {
        let result = exchange_with(port, case.bytes, LIMIT, case.half_close).await;
        let status = match &result {
            Ok(reply) => reply.status.to_string(),
            Err(_) => "-".to_owned(),
        };
        if let Err(why) = judge(case.expect, &result) {
            failures.push(format!("{}: {why}", case.name));
        }
        table.push(format!("{status:>4}  {}", case.name));
        assert!(
            proxy.alive(),
            "the proxy died after {:?}; stderr:\n{}",
            case.name,
            proxy.stderr()
        );
    }
    println!("fixed bad requests: {total} cases\n{}", table.join("\n"));
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_a_real_client_still_works(&mut proxy).await;
    assert_no_panic_logged(&proxy);
}

// === Randomized mutations ===

/// Values that break types, sizes and encodings when put anywhere in a request.
fn odd_value(rng: &mut Rng) -> Value {
    match rng.below(16) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(u64::MAX),
        4 => json!(1.5e308),
        5 => json!(""),
        6 => json!("\u{0}\u{1f}\u{7f}"),
        7 => json!("é😀\u{202e}"),
        8 => json!("x".repeat(1 << rng.below(17))),
        9 => json!([]),
        10 => json!({}),
        11 => json!([1, "2", null, {"a": []}]),
        12 => json!({"name": "fault__echo", "arguments": {"message": "nested"}}),
        13 => json!("fault__echo"),
        14 => json!("2025-06-18"),
        _ => {
            let depth = rng.below(200);
            let mut v = json!(0);
            for _ in 0..depth {
                v = json!([v]);
            }
            v
        }
    }
}

/// The path of a random node of `value` (empty for the root).
fn random_path(value: &Value, rng: &mut Rng) -> Vec<Value> {
    let mut path = Vec::new();
    let mut node = value;
    loop {
        let next = match node {
            Value::Object(map) if !map.is_empty() && rng.chance(70) => {
                let key = map
                    .keys()
                    .nth(rng.below(map.len()))
                    .cloned()
                    .unwrap_or_default();
                path.push(json!(key));
                map.get(path.last().and_then(Value::as_str).unwrap_or_default())
            }
            Value::Array(items) if !items.is_empty() && rng.chance(70) => {
                let i = rng.below(items.len());
                path.push(json!(i));
                items.get(i)
            }
            _ => None,
        };
        match next {
            Some(n) => node = n,
            None => return path,
        }
    }
}

fn node_mut<'a>(value: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    let mut node = value;
    for step in path {
        node = match step {
            Value::String(k) => node.get_mut(k.as_str())?,
            Value::Number(n) => node.get_mut(n.as_u64()? as usize)?,
            _ => return None,
        };
    }
    Some(node)
}

/// One structural mutation of a JSON request.
fn mutate_json(value: &mut Value, rng: &mut Rng) {
    const METHODS: &[&str] = &[
        "initialize",
        "tools/call",
        "tools/list",
        "ping",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "completion/complete",
        "logging/setLevel",
        "server/discover",
        "notifications/initialized",
        "notifications/cancelled",
        "",
        "tools/call/extra",
        "TOOLS/CALL",
    ];
    const NAMES: &[&str] = &[
        "fault__echo",
        "fault__add",
        "fault__pid",
        "fault__nope",
        "echo",
        "",
        "fault__",
        "__echo",
    ];
    let path = random_path(value, rng);
    match rng.below(7) {
        0 => {
            if let Some(node) = node_mut(value, &path) {
                *node = odd_value(rng);
            }
        }
        1 => {
            // Remove a key or an item.
            if let Some((last, parent)) = path.split_last()
                && let Some(parent) = node_mut(value, parent)
            {
                match (parent, last) {
                    (Value::Object(map), Value::String(k)) => {
                        map.remove(k);
                    }
                    (Value::Array(items), Value::Number(i)) => {
                        let i = i.as_u64().unwrap_or(0) as usize;
                        if i < items.len() {
                            items.remove(i);
                        }
                    }
                    _ => {}
                }
            }
        }
        2 => {
            if let Some(Value::Object(map)) = node_mut(value, &path) {
                let key = *rng.pick(&["_meta", "id", "jsonrpc", "method", "params", "extra", ""]);
                map.insert(key.to_owned(), odd_value(rng));
            }
        }
        3 => {
            if let Value::Object(map) = value {
                map.insert("method".to_owned(), json!(rng.pick(METHODS)));
            }
        }
        4 => {
            if let Some(params) = value.get_mut("params")
                && let Value::Object(map) = params
            {
                map.insert("name".to_owned(), json!(rng.pick(NAMES)));
            }
        }
        5 => {
            if let Value::Object(map) = value {
                let id = match rng.below(6) {
                    0 => json!("string-id"),
                    1 => Value::Null,
                    2 => json!(-7),
                    3 => json!(2.5),
                    4 => json!(u64::MAX),
                    _ => json!({"id": 1}),
                };
                map.insert("id".to_owned(), id);
            }
        }
        _ => {
            // Wrap in a batch.
            let inner = value.take();
            *value = json!([inner]);
        }
    }
}

/// One byte-level mutation of a serialized request.
fn mutate_bytes(bytes: &mut Vec<u8>, rng: &mut Rng) {
    const INTERESTING: &[u8] = b"{}[]\":,\\\0\xff\xfe\xc3\x80 \n\t-0e.";
    let len = bytes.len();
    match rng.below(7) {
        0 if len > 0 => {
            let i = rng.below(len);
            bytes[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            bytes[i] = *rng.pick(INTERESTING);
        }
        2 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16)).min(len);
            bytes.drain(start..end);
        }
        3 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let insert: Vec<u8> = (0..n)
                .map(|_| {
                    if rng.chance(50) {
                        rng.byte()
                    } else {
                        *rng.pick(INTERESTING)
                    }
                })
                .collect();
            bytes.splice(at..at, insert);
        }
        4 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(32)).min(len);
            let chunk = bytes[start..end].to_vec();
            let at = rng.below(bytes.len() + 1);
            bytes.splice(at..at, chunk);
        }
        5 if len > 0 => bytes.truncate(rng.below(len)),
        _ => {
            if len > 1 {
                let (i, j) = (rng.below(len), rng.below(len));
                bytes.swap(i, j);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_initialize_and_tools_call_bodies_never_get_a_5xx_or_a_hang() {
    let mut proxy = Proxy::start("mutated").await;
    let port = proxy.port;
    let session = open_session(port).await;
    let mut rng = Rng::new(SEED);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut failures = Vec::new();
    let mut closed = 0;
    for n in 0..MUTATED {
        // A base request.
        let id = json!(1000 + n);
        let mut value = match rng.below(4) {
            0 => initialize_body(id),
            1 | 2 => call_body(id, "fault__echo", json!({"message": format!("m{n}")})),
            _ => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        };
        // Structural mutations, then byte mutations (sometimes none, so valid-but-odd JSON
        // reaches the handlers).
        for _ in 0..1 + rng.below(3) {
            mutate_json(&mut value, &mut rng);
        }
        let mut body = value.to_string().into_bytes();
        let byte_mutations = if rng.chance(65) { 0 } else { 1 + rng.below(3) };
        for _ in 0..byte_mutations {
            mutate_bytes(&mut body, &mut rng);
        }
        // Headers: mostly right, in the live session, sometimes not.
        let bogus_session = format!("bogus-{}", rng.next_u64());
        let session_id: Option<&[u8]> = match rng.below(10) {
            0..=5 => Some(session.id.as_bytes()),
            6 => Some(bogus_session.as_bytes()),
            7 => Some(b"\xff\x00x"),
            _ => None,
        };
        let content_type: Option<&[u8]> = match rng.below(12) {
            0 => None,
            1 => Some(b"text/plain"),
            2 => Some(b"application/json; charset=latin1"),
            _ => Some(JSON),
        };
        let accept: Option<&[u8]> = match rng.below(12) {
            0 => None,
            1 => Some(b"application/json"),
            _ => Some(ACCEPT_BOTH),
        };
        let version: &[u8] = match rng.below(10) {
            0 => b"1999-01-01",
            1 => b"2026-07-28",
            _ => session.protocol.as_bytes(),
        };
        let mut headers: Vec<(&str, &[u8])> = Vec::new();
        if let Some(ct) = content_type {
            headers.push(("Content-Type", ct));
        }
        if let Some(a) = accept {
            headers.push(("Accept", a));
        }
        if let Some(s) = session_id {
            headers.push(("Mcp-Session-Id", s));
            headers.push(("MCP-Protocol-Version", version));
        }
        let bytes = request_bytes("POST", "/mcp", port, &headers, &body, false);
        let result = exchange(port, bytes, LIMIT).await;
        match &result {
            Ok(reply) => *statuses.entry(reply.status).or_default() += 1,
            Err(_) => closed += 1,
        }
        if let Err(why) = judge(Expect::Any, &result) {
            failures.push(format!(
                "request {n} (seed {SEED:#x}): {why}\n  body: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        assert!(
            proxy.alive(),
            "the proxy died after mutated request {n} (seed {SEED:#x}): {}\nstderr:\n{}",
            String::from_utf8_lossy(&body),
            proxy.stderr()
        );
    }
    println!(
        "mutated requests: {MUTATED} cases (seed {SEED:#x}); statuses: {statuses:?}; no response: {closed}"
    );
    assert!(
        failures.is_empty(),
        "{} of {MUTATED} mutated requests failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The mutations must have reached the handlers, not only the header checks.
    assert!(
        statuses.get(&200).copied().unwrap_or(0) > 0,
        "no mutated request got as far as a 200: {statuses:?}"
    );
    assert_a_real_client_still_works(&mut proxy).await;
    assert_no_panic_logged(&proxy);
}

/// The id of a JSON-RPC request in `body`, when it is one the session path answers: a
/// `tools/call` object with a string or integer id.
fn call_id(body: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(body).ok()?;
    if value.get("method")? != "tools/call" {
        return None;
    }
    let id = value.get("id")?;
    (id.is_string() || id.is_i64() || id.is_u64()).then(|| id.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_tool_calls_in_a_live_session_get_their_own_answer_or_a_4xx() {
    let mut proxy = Proxy::start("mutated-calls").await;
    let port = proxy.port;
    let session = open_session(port).await;
    let headers = session.headers();
    let mut rng = Rng::new(SEED ^ 0xFA57);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut json_answers = 0;
    let mut echoes_checked = 0;
    let mut failures = Vec::new();
    for n in 0..MUTATED_CALLS {
        let id = if rng.chance(50) {
            json!(5000 + n)
        } else {
            json!(format!("call-{n}"))
        };
        let message = format!("m{n}");
        let mut value = match rng.below(10) {
            0..=5 => call_body(id.clone(), "fault__echo", json!({"message": message})),
            6 => json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "fault__echo", "arguments": {"message": message},
                "_meta": {"progressToken": n}}}),
            7 => json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "test"}}),
            8 => call_body(id.clone(), "fault__nope", json!({})),
            _ => call_body(id.clone(), "fault__echo", json!({})),
        };
        // One case in five is sent as it is; the rest get JSON mutations, and some of those
        // byte mutations too.
        let mutated = !rng.chance(20);
        if mutated {
            for _ in 0..1 + rng.below(3) {
                mutate_json(&mut value, &mut rng);
            }
        }
        let mut body = value.to_string().into_bytes();
        if mutated && rng.chance(25) {
            for _ in 0..1 + rng.below(3) {
                mutate_bytes(&mut body, &mut rng);
            }
        }
        let bytes = request_bytes("POST", "/mcp", port, &headers, &body, false);
        let result = exchange(port, bytes, LIMIT).await;
        let shown = || {
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        };
        if let Err(why) = judge(Expect::Any, &result) {
            failures.push(format!("call {n}: {why}\n  body: {}", shown()));
        }
        if let Ok(reply) = &result {
            *statuses.entry(reply.status).or_default() += 1;
            let is_json = reply
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json"));
            // A JSON answer to a call must be a whole JSON-RPC answer to that call's id.
            if let (200, true, Some(want)) = (reply.status, is_json, call_id(&body)) {
                json_answers += 1;
                let answer: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
                let whole = answer["jsonrpc"] == "2.0"
                    && answer.get("id") == Some(&want)
                    && (answer.get("result").is_some() != answer.get("error").is_some());
                if !whole {
                    failures.push(format!(
                        "call {n}: not a JSON-RPC answer to id {want}: {}\n  body: {}",
                        reply.text(),
                        shown()
                    ));
                }
            }
            // A call sent as it is gets the right result.
            if !mutated
                && value["params"]["name"] == "fault__echo"
                && value["params"]["arguments"].get("message").is_some()
            {
                echoes_checked += 1;
                let right = reply
                    .messages()
                    .iter()
                    .any(|m| m["id"] == id && m["result"]["content"][0]["text"] == json!(message));
                if !right {
                    failures.push(format!(
                        "call {n}: an unchanged echo did not get its message back: {}",
                        reply.text()
                    ));
                }
            }
        }
        assert!(
            proxy.alive(),
            "the proxy died after mutated call {n} (seed {:#x}): {}\nstderr:\n{}",
            SEED ^ 0xFA57,
            shown(),
            proxy.stderr()
        );
    }
    println!(
        "mutated tool calls in a live session: {MUTATED_CALLS} cases (seed {:#x}); statuses: \
         {statuses:?}; JSON answers checked: {json_answers}; unchanged echoes checked: \
         {echoes_checked}",
        SEED ^ 0xFA57
    );
    assert!(
        failures.is_empty(),
        "{} of {MUTATED_CALLS} mutated calls failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Many of them were answered as JSON, and the unchanged echoes were checked.
    assert!(
        json_answers > MUTATED_CALLS / 5,
        "only {json_answers} calls were answered as JSON: {statuses:?}"
    );
    assert!(echoes_checked > 20, "only {echoes_checked} echoes checked");
    assert_a_real_client_still_works(&mut proxy).await;
    assert_no_panic_logged(&proxy);
}
