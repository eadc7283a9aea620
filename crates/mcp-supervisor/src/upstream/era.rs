//! What a generation does differently when it speaks protocol 2026-07-28 to its server (the
//! stateless era): `server/discover` instead of the `initialize` handshake, the client's identity
//! in every request's `_meta`, the version retry a server asks for with `-32022`, and the
//! input-required results (SEP-2322) a call answers with another round. Also the HTTP headers
//! that mirror a request (SEP-2243), which any era may send.
//!
//! Plain functions over JSON text: they never send, wait or decide about a failure; the link
//! ([`super::WireLink`]) drives them.

use std::borrow::Cow;

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::headers::{self, ParamHeader};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::rpc::members::{self, Members};
use crate::error::HandshakeError;

/// The stateless protocol version.
pub const STATELESS: &str = mcp_supervisor_core::versions::STATELESS;
/// The version asked for when a server does not speak the stateless era.
pub const FALLBACK: &str = "2025-11-25";
/// The versions of the handshake era this client speaks, newest first.
const STATEFUL: [&str; 4] = mcp_supervisor_core::versions::HANDSHAKE;
/// The error code of a request whose protocol version the server does not support.
pub const UNSUPPORTED_VERSION: i32 = -32022;

const META: &str = "_meta";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The `subscriptions/listen` params that ask a stateless server for every list change its
/// discovered capabilities offer (`tools`, `prompts`, `resources` with `listChanged`), with the
/// client's identity in `_meta`; `None` when it offers none.
pub fn listen_params(discovered: &RawValue, identity: &RawValue) -> Option<Box<RawValue>> {
    #[derive(Deserialize, Default)]
    struct Changes {
        #[serde(rename = "listChanged", default)]
        list_changed: bool,
    }
    #[derive(Deserialize, Default)]
    struct Capabilities {
        #[serde(default)]
        tools: Option<Changes>,
        #[serde(default)]
        prompts: Option<Changes>,
        #[serde(default)]
        resources: Option<Changes>,
    }
    #[derive(Deserialize)]
    struct Discovered {
        #[serde(default)]
        capabilities: Capabilities,
    }
    let offered = serde_json::from_str::<Discovered>(discovered.get()).ok()?;
    let on = |c: &Option<Changes>| c.as_ref().is_some_and(|c| c.list_changed);
    let mut filter = serde_json::Map::new();
    for (name, offered) in [
        ("toolsListChanged", on(&offered.capabilities.tools)),
        ("promptsListChanged", on(&offered.capabilities.prompts)),
        ("resourcesListChanged", on(&offered.capabilities.resources)),
    ] {
        if offered {
            filter.insert(name.into(), serde_json::Value::Bool(true));
        }
    }
    if filter.is_empty() {
        return None;
    }
    let params =
        serde_json::value::to_raw_value(&serde_json::json!({ "notifications": filter })).ok()?;
    with_identity(Some(&params), identity)
}

/// The protocol version a handshake's params ask for, if they name one.
pub fn asked_version(params: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Asked<'a> {
        #[serde(rename = "protocolVersion", borrow)]
        version: Option<Cow<'a, str>>,
    }
    serde_json::from_str::<Asked<'_>>(params.get())
        .ok()?
        .version
        .map(Cow::into_owned)
}

/// Whether a handshake is a stateless client's: its `_meta` names the stateless version (a
/// client that sends `initialize`, whatever version it asks for, is of the handshake era).
pub fn is_stateless(params: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
        version: Option<Cow<'a, str>>,
    }
    #[derive(Deserialize)]
    struct Handshake<'a> {
        #[serde(rename = "_meta", borrow)]
        meta: Option<Meta<'a>>,
    }
    serde_json::from_str::<Handshake<'_>>(params.get())
        .ok()
        .and_then(|h| h.meta?.version)
        .is_some_and(|v| v == STATELESS)
}

/// The handshake's params with `protocolVersion` set to `version`.
pub fn with_version(params: &RawValue, version: &str) -> Option<Box<RawValue>> {
    super::rpc::with_member(params, "protocolVersion", &json_string(version))
}

/// The `_meta` members every stateless request carries, from the client's handshake params
/// (`clientInfo`, `capabilities`), as a JSON object.
pub fn identity(params: &RawValue, version: &str) -> Box<RawValue> {
    #[derive(Deserialize)]
    struct Handshake<'a> {
        #[serde(rename = "clientInfo", borrow)]
        client_info: Option<&'a RawValue>,
        #[serde(borrow)]
        capabilities: Option<&'a RawValue>,
    }
    let handshake = serde_json::from_str::<Handshake<'_>>(params.get()).ok();
    let version = json_string(version);
    let empty = crate::link::empty_object();
    let mut out: Vec<(Cow<'_, str>, &RawValue)> = vec![(META_VERSION.into(), &version)];
    if let Some(info) = handshake.as_ref().and_then(|h| h.client_info) {
        out.push((META_CLIENT.into(), info));
    }
    let capabilities = handshake
        .as_ref()
        .and_then(|h| h.capabilities)
        .unwrap_or(&empty);
    out.push((META_CAPABILITIES.into(), capabilities));
    members::write(&out).unwrap_or_else(crate::link::empty_object)
}

/// `params` with the identity's members in its `_meta` (created if missing); members the
/// request already has are kept as they are (a client's own `_meta` wins). A request whose
/// `_meta` already names a protocol version is a stateless client's own: it goes as it came,
/// so the server judges what that client sent.
pub fn with_identity(params: Option<&RawValue>, identity: &RawValue) -> Option<Box<RawValue>> {
    let empty = crate::link::empty_object();
    let params = params.unwrap_or(&empty);
    let mut top = serde_json::from_str::<Members<'_>>(params.get()).ok()?.0;
    let merged;
    match top.iter_mut().find(|(k, _)| k == META) {
        Some(meta) => {
            let mut inner = serde_json::from_str::<Members<'_>>(meta.1.get()).ok()?.0;
            if inner.iter().any(|(k, _)| k == META_VERSION) {
                return Some(params.to_owned());
            }
            let ours = serde_json::from_str::<Members<'_>>(identity.get()).ok()?.0;
            for (key, value) in ours {
                if !inner.iter().any(|(k, _)| *k == key) {
                    inner.push((key, value));
                }
            }
            merged = members::write(&inner)?;
            meta.1 = &merged;
        }
        None => top.push((META.into(), identity)),
    }
    members::write(&top)
}

/// The `_meta` keys of the stateless era's envelope: they belong to one hop, and a strict server
/// of the handshake era refuses a request that carries them (SPEC §10). Other
/// `io.modelcontextprotocol/` keys (a related task, say) belong to both eras and pass.
const ENVELOPE: [&str; 3] = [META_VERSION, META_CLIENT, META_CAPABILITIES];

/// The word every key of the envelope begins with.
static ENVELOPE_WORD: mcp_supervisor_core::skim::Word =
    mcp_supervisor_core::skim::Word::new("io.modelcontextprotocol/");

/// `params` without the envelope's members in its `_meta` (and without `_meta` when nothing else
/// was in it), every other member in its order and text; `None` when there is nothing to take
/// out, so the caller sends what it has. Cheap when the text names no envelope key.
pub fn without_envelope(params: &RawValue) -> Option<Box<RawValue>> {
    if !ENVELOPE_WORD.in_text(params.get()) {
        return None;
    }
    let mut top = serde_json::from_str::<Members<'_>>(params.get()).ok()?.0;
    let at = top.iter().position(|(k, _)| k == META)?;
    let mut inner = serde_json::from_str::<Members<'_>>(top[at].1.get()).ok()?.0;
    let before = inner.len();
    inner.retain(|(k, _)| !ENVELOPE.contains(&k.as_ref()));
    if inner.len() == before {
        return None;
    }
    let rest;
    if inner.is_empty() {
        top.remove(at);
    } else {
        rest = members::write(&inner)?;
        top[at].1 = &rest;
    }
    members::write(&top)
}

/// A stateless server's `server/discover` answer (or its `initialize` answer, as made by `as_initialize_result`) as the
/// answer to a handshake-era client's `initialize` at `version`: its capabilities and
/// instructions, and the server info it carries in `_meta`. `None` when `held` is not a
/// stateless answer (a handshake server's own answer goes as it is).
pub fn as_handshake_result(held: &RawValue, version: &str) -> Option<Box<RawValue>> {
    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "io.modelcontextprotocol/serverInfo", borrow)]
        server_info: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Held<'a> {
        #[serde(rename = "protocolVersion", borrow)]
        protocol_version: Option<Cow<'a, str>>,
        #[serde(rename = "supportedVersions", borrow)]
        supported: Option<&'a RawValue>,
        #[serde(borrow)]
        capabilities: Option<&'a RawValue>,
        #[serde(rename = "serverInfo", borrow)]
        server_info: Option<&'a RawValue>,
        #[serde(borrow)]
        instructions: Option<&'a RawValue>,
        #[serde(rename = "_meta", borrow)]
        meta: Option<Meta<'a>>,
    }
    let held: Held<'_> = serde_json::from_str(held.get()).ok()?;
    let stateless = held.protocol_version.as_deref() == Some(STATELESS)
        || (held.protocol_version.is_none() && held.supported.is_some());
    if !stateless {
        return None;
    }
    let version = json_string(version);
    let empty = crate::link::empty_object();
    let unnamed = json_string("");
    let fallback_info;
    let info = match held.server_info.or(held.meta.and_then(|m| m.server_info)) {
        Some(info) => info,
        None => {
            fallback_info =
                members::write(&[("name".into(), &*unnamed), ("version".into(), &*unnamed)])?;
            &fallback_info
        }
    };
    let mut out: Vec<(Cow<'_, str>, &RawValue)> = vec![
        ("protocolVersion".into(), &version),
        ("capabilities".into(), held.capabilities.unwrap_or(&empty)),
        ("serverInfo".into(), info),
    ];
    if let Some(instructions) = held.instructions {
        out.push(("instructions".into(), instructions));
    }
    members::write(&out)
}

/// What a `server/discover` came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Discovered {
    /// The server speaks the stateless era.
    Stateless,
    /// The server asks for another version it supports: try the stateless era once more with
    /// the same version, or hand over to the handshake era with this one.
    Retry,
    /// The server does not speak the stateless era: use the handshake with this version.
    Handshake(&'static str),
}

/// Judge a `server/discover` answer.
pub fn judge_discover(
    outcome: &Result<Box<RawValue>, Failure>,
) -> Result<Discovered, HandshakeError> {
    match outcome {
        Ok(result) => {
            #[derive(Deserialize)]
            struct Discover<'a> {
                #[serde(rename = "supportedVersions", borrow, default)]
                supported: Vec<Cow<'a, str>>,
            }
            let discover: Discover<'_> = serde_json::from_str(result.get())
                .map_err(|_| HandshakeError::DiscoverNotObject)?;
            if discover.supported.iter().any(|v| v == STATELESS) {
                Ok(Discovered::Stateless)
            } else {
                Ok(Discovered::Handshake(stateful_of(&discover.supported)))
            }
        }
        Err(Failure::ServerError { code, data, .. }) if *code == UNSUPPORTED_VERSION => {
            Ok(unsupported(data.as_deref()))
        }
        // Any other error answer (method not found, not initialized, ...): the server is of
        // the handshake era.
        Err(Failure::ServerError { .. }) => Ok(Discovered::Handshake(FALLBACK)),
        Err(failure @ Failure::HttpStatus { status, body, .. }) => match error_in_body(body) {
            Some((code, data)) if code == UNSUPPORTED_VERSION => Ok(unsupported(data.as_deref())),
            // A server of the handshake era refuses a request outside a session.
            _ if matches!(status, 400 | 404 | 405) => Ok(Discovered::Handshake(FALLBACK)),
            _ => Err(HandshakeError::Discover(failure.clone())),
        },
        Err(failure) => Err(HandshakeError::Discover(failure.clone())),
    }
}

fn unsupported(data: Option<&str>) -> Discovered {
    #[derive(Deserialize)]
    struct Data {
        #[serde(default)]
        supported: Vec<String>,
    }
    let supported = data
        .and_then(|d| serde_json::from_str::<Data>(d).ok())
        .map(|d| d.supported)
        .unwrap_or_default();
    if supported.is_empty() || supported.iter().any(|v| v == STATELESS) {
        Discovered::Retry
    } else {
        let supported: Vec<Cow<'_, str>> = supported.iter().map(|s| s.as_str().into()).collect();
        Discovered::Handshake(stateful_of(&supported))
    }
}

/// The newest handshake-era version both sides speak (the newest of ours if none is named).
fn stateful_of(supported: &[Cow<'_, str>]) -> &'static str {
    STATEFUL
        .iter()
        .find(|ours| supported.iter().any(|v| v == *ours))
        .copied()
        .unwrap_or(FALLBACK)
}

/// The JSON-RPC error in an HTTP error response's body: code and data as text.
fn error_in_body(body: &str) -> Option<(i32, Option<String>)> {
    #[derive(Deserialize)]
    struct Response<'a> {
        #[serde(borrow)]
        error: &'a RawValue,
    }
    let response: Response<'_> = serde_json::from_str(body).ok()?;
    let error = crate::link::RpcError::from_json(response.error)?;
    Some((
        i32::try_from(error.code).ok()?,
        error.data.map(|d| d.get().to_string()),
    ))
}

/// The server's `server/discover` answer as an `initialize`-shaped result: the answer whole,
/// with `protocolVersion` set to the stateless version.
pub fn as_initialize_result(discover: &RawValue) -> Option<Box<RawValue>> {
    super::rpc::with_member(discover, "protocolVersion", &json_string(STATELESS))
}

/// An input-required result (SEP-2322): the server needs answers before the call can finish.
#[derive(Debug)]
pub struct InputRequired {
    /// Each request by its key: method and params.
    pub requests: Vec<(String, String, Option<Box<RawValue>>)>,
    /// The opaque state to echo, exactly as it came.
    pub state: Option<Box<RawValue>>,
}

/// The input requests of a result whose `resultType` is `input_required`; `None` for any
/// other result (no `resultType` means complete).
pub fn input_required(result: &RawValue) -> Option<InputRequired> {
    if !crate::link::is_input_required(result) {
        return None;
    }
    #[derive(Deserialize)]
    struct Request {
        method: String,
        #[serde(default)]
        params: Option<Box<RawValue>>,
    }
    #[derive(Deserialize)]
    struct Result<'a> {
        #[serde(rename = "inputRequests", borrow, default)]
        input_requests: Option<&'a RawValue>,
        #[serde(rename = "requestState", default)]
        request_state: Option<Box<RawValue>>,
    }
    let read: Result<'_> = serde_json::from_str(result.get()).ok()?;
    let mut requests = Vec::new();
    if let Some(asked) = read.input_requests {
        // In the server's order, each as it came.
        for (key, request) in serde_json::from_str::<Members<'_>>(asked.get()).ok()?.0 {
            let request: Request = serde_json::from_str(request.get()).ok()?;
            requests.push((key.into_owned(), request.method, request.params));
        }
    }
    Some(InputRequired {
        requests,
        state: read.request_state,
    })
}

/// The params of the next round: the original request's, with `inputResponses` and (only when
/// the server sent one) `requestState` set.
pub fn next_round(
    original: Option<&RawValue>,
    responses: &[(String, Box<RawValue>)],
    state: Option<&RawValue>,
) -> Option<Box<RawValue>> {
    let empty = crate::link::empty_object();
    let original = original.unwrap_or(&empty);
    let answers: Vec<(Cow<'_, str>, &RawValue)> = responses
        .iter()
        .map(|(k, v)| (Cow::Borrowed(k.as_str()), &**v))
        .collect();
    let answers = members::write(&answers)?;
    let mut params = super::rpc::with_member(original, "inputResponses", &answers)?;
    if let Some(state) = state {
        params = super::rpc::with_member(&params, "requestState", state)?;
    }
    Some(params)
}

/// The HTTP headers that mirror a request (SEP-2243): `Mcp-Method`, `Mcp-Name` for
/// `tools/call` and `prompts/get` (the name) and `resources/read` (the URI), and the
/// `Mcp-Param-*` headers of a tool's declared arguments.
pub fn mirrored_headers(
    method: &str,
    params: Option<&RawValue>,
    declared: &[ParamHeader],
) -> Vec<(String, String)> {
    let mut out = vec![("Mcp-Method".to_string(), method.to_string())];
    let named = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    let (Some(field), Some(params)) = (named, params) else {
        return out;
    };
    #[derive(Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        uri: Option<Cow<'a, str>>,
        #[serde(default)]
        arguments: Option<&'a RawValue>,
    }
    let Ok(read) = serde_json::from_str::<Named<'_>>(params.get()) else {
        return out;
    };
    let name = if field == "uri" { read.uri } else { read.name };
    if let Some(value) = name.and_then(|n| headers::encode_value(&serde_json::Value::from(&*n))) {
        out.push(("Mcp-Name".to_string(), value));
    }
    if !declared.is_empty()
        && let Some(arguments) = read.arguments
        && let Ok(arguments) = serde_json::from_str::<serde_json::Value>(arguments.get())
    {
        out.extend(headers::mirror(declared, &arguments));
    }
    out
}

fn json_string(s: &str) -> Box<RawValue> {
    serde_json::value::to_raw_value(s).unwrap_or_else(|_| crate::link::empty_object())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    fn value(text: &RawValue) -> serde_json::Value {
        serde_json::from_str(text.get()).unwrap()
    }

    #[test]
    fn listen_asks_for_the_list_changes_the_server_offers() {
        let identity = identity(
            &raw(r#"{"clientInfo":{"name":"c","version":"1"},"capabilities":{}}"#),
            STATELESS,
        );
        let both = raw(
            r#"{"capabilities":{"tools":{"listChanged":true},"prompts":{"listChanged":false},"resources":{"listChanged":true,"subscribe":true}},"serverInfo":{"name":"s","version":"1"}}"#,
        );
        let params = listen_params(&both, &identity).expect("two offered");
        let params = value(&params);
        assert_eq!(
            params["notifications"],
            serde_json::json!({ "toolsListChanged": true, "resourcesListChanged": true })
        );
        assert_eq!(params["_meta"][META_VERSION], STATELESS);
        let none = raw(r#"{"capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}"#);
        assert!(listen_params(&none, &identity).is_none());
        assert!(listen_params(&raw("[]"), &identity).is_none());
    }

    #[test]
    fn only_a_handshake_with_the_stateless_meta_is_stateless() {
        assert!(is_stateless(&raw(
            r#"{"protocolVersion":"2026-07-28","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
        )));
        // An `initialize` asking for the newest version is still the handshake era.
        assert!(!is_stateless(&raw(r#"{"protocolVersion":"2026-07-28"}"#)));
        assert!(!is_stateless(&raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}"#
        )));
        assert!(!is_stateless(&raw("[]")));
    }

    #[test]
    fn identity_carries_version_client_and_capabilities() {
        let params = raw(
            r#"{"protocolVersion":"2026-07-28","capabilities":{"roots":{}},"clientInfo":{"name":"c","version":"1"}}"#,
        );
        let id = value(&identity(&params, STATELESS));
        assert_eq!(id[META_VERSION], "2026-07-28");
        assert_eq!(id[META_CLIENT]["name"], "c");
        assert_eq!(id[META_CAPABILITIES], serde_json::json!({"roots": {}}));
        let bare = value(&identity(&raw("{}"), STATELESS));
        assert_eq!(bare[META_CAPABILITIES], serde_json::json!({}));
        assert!(bare.get(META_CLIENT).is_none());
    }

    #[test]
    fn identity_is_merged_into_meta_and_a_clients_own_members_win() {
        let id = identity(
            &raw(r#"{"capabilities":{},"clientInfo":{"name":"proxy","version":"1"}}"#),
            STATELESS,
        );
        let none = value(&with_identity(None, &id).unwrap());
        assert_eq!(none[META][META_VERSION], STATELESS);
        let kept = with_identity(
            Some(&raw(
                r#"{"name":"t","_meta":{"progressToken":7,"io.modelcontextprotocol/clientInfo":{"name":"mine"}},"arguments":{}}"#,
            )),
            &id,
        )
        .unwrap();
        let text = kept.get();
        assert!(
            text.starts_with(r#"{"name":"t","_meta":{"progressToken":7,"#),
            "{text}"
        );
        let kept = value(&kept);
        assert_eq!(kept[META][META_CLIENT]["name"], "mine");
        assert_eq!(kept[META][META_VERSION], STATELESS);
        assert_eq!(kept["arguments"], serde_json::json!({}));
        assert!(with_identity(Some(&raw("[1]")), &id).is_none());
        // A stateless client's own request is left as it came, even with a member missing.
        let own = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#;
        assert_eq!(with_identity(Some(&raw(own)), &id).unwrap().get(), own);
    }

    #[test]
    fn the_envelope_is_taken_out_and_everything_else_kept_in_order() {
        let params = raw(
            r#"{"name":"echo","_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c"},"io.modelcontextprotocol/related-task":{"taskId":"t"},"io.modelcontextprotocol/clientCapabilities":{}},"arguments":{"b":1,"a":2}}"#,
        );
        let out = without_envelope(&params).unwrap();
        assert_eq!(
            out.get(),
            r#"{"name":"echo","_meta":{"progressToken":7,"io.modelcontextprotocol/related-task":{"taskId":"t"}},"arguments":{"b":1,"a":2}}"#
        );
        let only =
            raw(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"x"}"#);
        assert_eq!(without_envelope(&only).unwrap().get(), r#"{"name":"x"}"#);
        for untouched in [
            r#"{"name":"x"}"#,
            r#"{"name":"io.modelcontextprotocol/x"}"#,
            r#"{"_meta":{"io.modelcontextprotocol/related-task":{}}}"#,
            r#"[1]"#,
        ] {
            assert!(without_envelope(&raw(untouched)).is_none(), "{untouched}");
        }
    }

    #[test]
    fn a_stateless_answer_is_shaped_for_a_handshake_client() {
        let discover = raw(
            r#"{"cacheScope":"private","capabilities":{"tools":{}},"resultType":"complete","supportedVersions":["2026-07-28"],"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"py","version":"1"}}}"#,
        );
        let held = as_initialize_result(&discover).unwrap();
        let out = as_handshake_result(&held, "2025-06-18").unwrap();
        assert_eq!(
            out.get(),
            r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"py","version":"1"}}"#
        );
        assert!(as_handshake_result(&discover, "2025-11-25").is_some());
        let handshake =
            raw(r#"{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s"}}"#);
        assert!(as_handshake_result(&handshake, "2025-11-25").is_none());
    }

    #[test]
    fn discover_outcomes_are_judged() {
        let ok = |t: &str| Ok(raw(t));
        assert_eq!(
            judge_discover(&ok(r#"{"supportedVersions":["2026-07-28"]}"#)),
            Ok(Discovered::Stateless)
        );
        assert_eq!(
            judge_discover(&ok(r#"{"supportedVersions":["2025-06-18"]}"#)),
            Ok(Discovered::Handshake("2025-06-18"))
        );
        // A generic `{}` answer is no discovery.
        assert_eq!(
            judge_discover(&ok("{}")),
            Ok(Discovered::Handshake(FALLBACK))
        );
        let unsupported = |data: &str| {
            Err(Failure::ServerError {
                code: UNSUPPORTED_VERSION,
                message: "Unsupported protocol version".into(),
                data: Some(data.into()),
            })
        };
        assert_eq!(
            judge_discover(&unsupported(r#"{"supported":["2026-07-28"]}"#)),
            Ok(Discovered::Retry)
        );
        assert_eq!(
            judge_discover(&unsupported(r#"{"supported":["2025-03-26"]}"#)),
            Ok(Discovered::Handshake("2025-03-26"))
        );
        let http = |status: u16, body: &str| {
            Err(Failure::HttpStatus {
                status,
                body: body.into(),
                with_session: false,
            })
        };
        assert_eq!(
            judge_discover(&http(
                400,
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no","data":{"supported":["2026-07-28"]}}}"#
            )),
            Ok(Discovered::Retry)
        );
        assert_eq!(
            judge_discover(&http(400, "Bad Request: No valid session ID provided")),
            Ok(Discovered::Handshake(FALLBACK))
        );
        assert_eq!(
            judge_discover(&Err(Failure::ServerError {
                code: -32601,
                message: "x".into(),
                data: None
            })),
            Ok(Discovered::Handshake(FALLBACK))
        );
        assert!(judge_discover(&http(500, "boom")).is_err());
        assert!(judge_discover(&Err(Failure::ConnectRefused)).is_err());
    }

    #[test]
    fn input_required_results_are_read_and_others_are_not() {
        assert!(input_required(&raw(r#"{"content":[]}"#)).is_none());
        assert!(
            input_required(&raw(
                r#"{"resultType":"complete","content":[{"type":"text","text":"input_required"}]}"#
            ))
            .is_none()
        );
        let read = input_required(&raw(
            r#"{"resultType":"input_required","inputRequests":{"b":{"method":"elicitation/create","params":{"message":"m"}},"a":{"method":"roots/list"}},"requestState":"s\"1"}"#,
        ))
        .unwrap();
        let keys: Vec<_> = read
            .requests
            .iter()
            .map(|(k, m, _)| (k.as_str(), m.as_str()))
            .collect();
        assert_eq!(keys, vec![("b", "elicitation/create"), ("a", "roots/list")]);
        assert_eq!(read.state.unwrap().get(), r#""s\"1""#);
        let stateless = input_required(&raw(
            r#"{"resultType":"input_required","inputRequests":{}}"#,
        ))
        .unwrap();
        assert!(stateless.state.is_none());
    }

    #[test]
    fn the_next_round_carries_responses_and_state_only_when_sent() {
        let original = raw(r#"{"name":"t","arguments":{"x":1}}"#);
        let responses = vec![("confirm".to_string(), raw(r#"{"action":"accept"}"#))];
        let with_state =
            next_round(Some(&original), &responses, Some(&raw(r#""opaque""#))).unwrap();
        assert_eq!(
            with_state.get(),
            r#"{"name":"t","arguments":{"x":1},"inputResponses":{"confirm":{"action":"accept"}},"requestState":"opaque"}"#
        );
        let without = next_round(Some(&original), &responses, None).unwrap();
        assert!(!without.get().contains("requestState"));
        // A later round replaces the previous round's members.
        let again = next_round(Some(&with_state), &responses, None).unwrap();
        assert_eq!(again.get().matches("inputResponses").count(), 1);
    }

    #[test]
    fn headers_mirror_method_name_and_declared_arguments() {
        let declared = headers::param_headers(&serde_json::json!({
            "properties": { "region": { "type": "string", "x-mcp-header": "Region" } }
        }))
        .unwrap();
        let got = mirrored_headers(
            "tools/call",
            Some(&raw(
                r#"{"name":"my-tool","arguments":{"region":"eu west","other":1}}"#,
            )),
            &declared,
        );
        assert_eq!(
            got,
            vec![
                ("Mcp-Method".into(), "tools/call".into()),
                ("Mcp-Name".into(), "my-tool".into()),
                ("Mcp-Param-Region".into(), "eu west".into()),
            ]
        );
        let read = mirrored_headers(
            "resources/read",
            Some(&raw(r#"{"uri":"file:///a%20b"}"#)),
            &[],
        );
        assert_eq!(read[1], ("Mcp-Name".into(), "file:///a%20b".into()));
        assert_eq!(mirrored_headers("tools/list", None, &[]).len(), 1);
    }
}
