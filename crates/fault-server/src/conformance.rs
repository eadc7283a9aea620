//! The fixtures that the server scenarios of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) call, written here from the scenario texts: `test_*`
//! tools, `test://` resources and templates, `test_*` prompts, completion, logging and resource
//! subscriptions, and the multi-round-trip (`input_required`, SEP-2322) tools of protocol
//! 2026-07-28. Active only with `--conformance`; it must never change what the fault server does
//! without that flag, and it holds no code of the suite's own.
// Sampling, logging and resource subscriptions are deprecated upstream (SEP-2577), but the
// suite's 2025-11-25 scenarios call them: these fixtures must speak them.
#![allow(deprecated)]

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::server::lock;
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult,
        CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock,
        CreateMessageRequestParams, ElicitRequest, ElicitRequestParams, GetPromptRequestParams,
        GetPromptResponse, GetPromptResult, InputRequest, InputRequests, InputRequiredResult,
        InputResponses, JsonObject, LoggingLevel, LoggingMessageNotificationParam,
        ProgressNotificationParam, Prompt, ReadResourceResult, Reference, Resource,
        ResourceTemplate, ServerRequest, Tool,
    },
    service::RequestContext,
};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A 1×1 red PNG.
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV file of eight silent 16-bit mono samples at 8 kHz.
const WAV_BASE64: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

const STATIC_TEXT_URI: &str = "test://static-text";
const STATIC_BINARY_URI: &str = "test://static-binary";
const WATCHED_URI: &str = "test://watched-resource";
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

/// The prompt whose `arg1` the completion fixture completes.
const PROMPT_WITH_ARGUMENTS: &str = "test_prompt_with_arguments";
/// The prompt that asks for input first (SEP-2322).
const INPUT_REQUIRED_PROMPT: &str = "test_input_required_result_prompt";
/// Meta key of the per-request client capabilities (protocol 2026-07-28).
const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// Meta key of the per-request log level (protocol 2026-07-28).
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";
/// JSON-RPC code of MissingRequiredClientCapabilityError (SEP-2575).
const MISSING_CAPABILITY_CODE: i32 = -32021;
/// How many issued `requestState` handles are remembered before the oldest are forgotten.
const MAX_STATES: usize = 4096;

/// What the fixture tools do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fixture {
    SimpleText,
    Image,
    Audio,
    EmbeddedResource,
    MixedContent,
    Logging,
    Error,
    Progress,
    Sampling,
    Elicitation,
    ElicitationDefaults,
    ElicitationEnums,
    JsonSchema,
    InputElicitation,
    InputSampling,
    InputRoots,
    InputRequestState,
    InputMultiple,
    InputMultiRound,
    InputTampered,
    InputCapabilities,
    MissingCapability,
    StreamingElicitation,
    LoggingTool,
}

const FIXTURES: [(&str, Fixture, &str); 24] = [
    (
        "test_simple_text",
        Fixture::SimpleText,
        "Replies with a fixed text.",
    ),
    ("test_image_content", Fixture::Image, "Replies with a PNG."),
    ("test_audio_content", Fixture::Audio, "Replies with a WAV."),
    (
        "test_embedded_resource",
        Fixture::EmbeddedResource,
        "Replies with an embedded text resource.",
    ),
    (
        "test_multiple_content_types",
        Fixture::MixedContent,
        "Replies with text, an image and an embedded resource.",
    ),
    (
        "test_tool_with_logging",
        Fixture::Logging,
        "Sends three info log messages 50 ms apart, then replies.",
    ),
    (
        "test_error_handling",
        Fixture::Error,
        "Always replies with an isError result.",
    ),
    (
        "test_tool_with_progress",
        Fixture::Progress,
        "Sends progress 0, 50 and 100 of 100, 50 ms apart, then replies.",
    ),
    (
        "test_sampling",
        Fixture::Sampling,
        "Asks the client to sample (sampling/createMessage) and replies with its answer.",
    ),
    (
        "test_elicitation",
        Fixture::Elicitation,
        "Asks the client for a username and email (elicitation/create) and replies with the answer.",
    ),
    (
        "test_elicitation_sep1034_defaults",
        Fixture::ElicitationDefaults,
        "Elicits a form whose fields all carry defaults (SEP-1034).",
    ),
    (
        "test_elicitation_sep1330_enums",
        Fixture::ElicitationEnums,
        "Elicits a form with the five enum shapes (SEP-1330).",
    ),
    (
        "json_schema_2020_12_tool",
        Fixture::JsonSchema,
        "Tool with JSON Schema 2020-12 features",
    ),
    (
        "test_input_required_result_elicitation",
        Fixture::InputElicitation,
        "Asks for a name through an input_required result, then greets.",
    ),
    (
        "test_input_required_result_sampling",
        Fixture::InputSampling,
        "Asks for a sampling answer through an input_required result.",
    ),
    (
        "test_input_required_result_list_roots",
        Fixture::InputRoots,
        "Asks for the client's roots through an input_required result.",
    ),
    (
        "test_input_required_result_request_state",
        Fixture::InputRequestState,
        "input_required with a requestState that the retry must echo.",
    ),
    (
        "test_input_required_result_multiple_inputs",
        Fixture::InputMultiple,
        "input_required with an elicitation, a sampling and a roots request at once.",
    ),
    (
        "test_input_required_result_multi_round",
        Fixture::InputMultiRound,
        "Two input_required rounds before the result.",
    ),
    (
        "test_input_required_result_tampered_state",
        Fixture::InputTampered,
        "input_required whose requestState is checked: a changed one is refused.",
    ),
    (
        "test_input_required_result_capabilities",
        Fixture::InputCapabilities,
        "input_required asking only what the client's declared capabilities allow.",
    ),
    (
        "test_missing_capability",
        Fixture::MissingCapability,
        "Needs the client's sampling capability: refused with -32021 when it is not declared.",
    ),
    (
        "test_streaming_elicitation",
        Fixture::StreamingElicitation,
        "Asks for a name through an input_required result (never a request on the response stream).",
    ),
    (
        "test_logging_tool",
        Fixture::LoggingTool,
        "Logs one message, only when the request sets a log level; then replies.",
    ),
];

fn fixture(name: &str) -> Option<Fixture> {
    FIXTURES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, f, _)| *f)
}

fn from_json<T: DeserializeOwned>(what: &str, value: Value) -> Result<T, McpError> {
    serde_json::from_value(value)
        .map_err(|e| McpError::internal_error(format!("fixture {what}: {e}"), None))
}

fn text_result(text: impl Into<String>) -> Result<CallToolResponse, McpError> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
}

fn empty_object_schema() -> Value {
    json!({ "type": "object", "properties": {} })
}

/// The JSON Schema 2020-12 input schema of `json_schema_2020_12_tool`.
fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" }
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false
    })
}

/// The fixture tools, in a fixed order.
pub fn tools() -> Vec<Tool> {
    FIXTURES
        .iter()
        .filter_map(|(name, kind, description)| {
            let schema = match kind {
                Fixture::Sampling => json!({
                    "type": "object",
                    "properties": { "prompt": { "type": "string", "description": "The prompt to sample" } },
                    "required": ["prompt"]
                }),
                Fixture::Elicitation => json!({
                    "type": "object",
                    "properties": { "message": { "type": "string", "description": "The message to show the user" } },
                    "required": ["message"]
                }),
                Fixture::JsonSchema => json_schema_2020_12(),
                _ => empty_object_schema(),
            };
            let Value::Object(schema) = schema else {
                return None;
            };
            Some(Tool::new(*name, *description, Arc::new(schema)))
        })
        .collect()
}

/// True when `name` is a fixture tool.
pub fn is_tool(name: &str) -> bool {
    fixture(name).is_some()
}

/// The fixture resources (not the templates).
pub fn resources() -> Vec<Resource> {
    vec![
        Resource::new(STATIC_TEXT_URI, "static-text")
            .with_description("A static text resource")
            .with_mime_type("text/plain"),
        Resource::new(STATIC_BINARY_URI, "static-binary")
            .with_description("A static PNG resource")
            .with_mime_type("image/png"),
        Resource::new(WATCHED_URI, "watched-resource")
            .with_description("A resource to subscribe to")
            .with_mime_type("text/plain"),
    ]
}

/// The fixture resource templates.
pub fn resource_templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(
            format!("{TEMPLATE_PREFIX}{{id}}{TEMPLATE_SUFFIX}"),
            "template",
        )
        .with_description("JSON data for the id")
        .with_mime_type("application/json"),
    ]
}

/// The fixture prompts.
pub fn prompts() -> Vec<Prompt> {
    let prompt = |value: Value| -> Option<Prompt> { serde_json::from_value(value).ok() };
    [
        json!({ "name": "test_simple_prompt", "description": "A prompt without arguments" }),
        json!({
            "name": PROMPT_WITH_ARGUMENTS,
            "description": "A prompt with two arguments",
            "arguments": [
                { "name": "arg1", "description": "First test argument", "required": true },
                { "name": "arg2", "description": "Second test argument", "required": true }
            ]
        }),
        json!({
            "name": "test_prompt_with_embedded_resource",
            "description": "A prompt that embeds a resource",
            "arguments": [
                { "name": "resourceUri", "description": "URI of the resource to embed", "required": true }
            ]
        }),
        json!({ "name": "test_prompt_with_image", "description": "A prompt with an image" }),
        json!({
            "name": INPUT_REQUIRED_PROMPT,
            "description": "A prompt that asks for context first (input_required)"
        }),
    ]
    .into_iter()
    .filter_map(prompt)
    .collect()
}

/// `resources/read` of a fixture URI; `None` when the URI is not one.
pub fn read_resource(uri: &str) -> Option<Result<ReadResourceResult, McpError>> {
    let contents = if uri == STATIC_TEXT_URI {
        json!([{ "uri": uri, "mimeType": "text/plain",
                 "text": "This is the content of the static text resource." }])
    } else if uri == STATIC_BINARY_URI {
        json!([{ "uri": uri, "mimeType": "image/png", "blob": PNG_BASE64 }])
    } else if uri == WATCHED_URI {
        json!([{ "uri": uri, "mimeType": "text/plain", "text": "The watched resource." }])
    } else if let Some(id) = uri
        .strip_prefix(TEMPLATE_PREFIX)
        .and_then(|rest| rest.strip_suffix(TEMPLATE_SUFFIX))
        && !id.is_empty()
        && !id.contains('/')
    {
        let data = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
        json!([{ "uri": uri, "mimeType": "application/json", "text": data.to_string() }])
    } else {
        return None;
    };
    Some(from_json(
        "resource",
        json!({ "resultType": "complete", "contents": contents }),
    ))
}

/// The error for a URI that names no resource (SEP-2164: -32602 with the URI in `data`).
pub fn resource_not_found(uri: &str) -> McpError {
    McpError::invalid_params("Resource not found", Some(json!({ "uri": uri })))
}

/// `completion/complete`: `arg1` of `test_prompt_with_arguments` from a fixed word list.
pub fn complete(request: &CompleteRequestParams) -> Result<CompleteResult, McpError> {
    const WORDS: [&str; 6] = ["paris", "park", "party", "test", "testing", "tests"];
    let values: Vec<String> = match &request.r#ref {
        Reference::Prompt(prompt)
            if prompt.name == PROMPT_WITH_ARGUMENTS && request.argument.name == "arg1" =>
        {
            WORDS
                .iter()
                .filter(|w| w.starts_with(request.argument.value.as_str()))
                .map(|w| (*w).to_owned())
                .collect()
        }
        _ => Vec::new(),
    };
    let total = u32::try_from(values.len()).unwrap_or(u32::MAX);
    let mut info = CompletionInfo::new(values).map_err(|e| McpError::internal_error(e, None))?;
    info.total = Some(total);
    info.has_more = Some(false);
    Ok(CompleteResult::new(info))
}

// === impl Fixtures ===

/// What the fixtures remember: issued `requestState` handles and subscribed URIs.
pub struct Fixtures {
    /// requestState handle → (tool or prompt name, round it was issued in).
    states: Mutex<HashMap<String, (String, u32)>>,
    subscriptions: Mutex<HashSet<String>>,
    counter: AtomicU64,
    /// Mixed into every handle so that handles of an earlier run are unknown.
    seed: u64,
}

/// An input request from its wire form (`{"method": …, "params": …}`).
fn input_request(method: &str, params: Value) -> Result<InputRequest, McpError> {
    from_json(
        "input request",
        json!({ "method": method, "params": params }),
    )
}

fn elicit_input(message: &str, field: &str, kind: &str) -> Result<InputRequest, McpError> {
    input_request(
        "elicitation/create",
        json!({
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": { field: { "type": kind } },
                "required": [field]
            }
        }),
    )
}

fn sampling_input(text: &str, max_tokens: u32) -> Result<InputRequest, McpError> {
    input_request(
        "sampling/createMessage",
        json!({
            "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
            "maxTokens": max_tokens
        }),
    )
}

fn roots_input() -> Result<InputRequest, McpError> {
    input_request("roots/list", json!({}))
}

/// The accepted elicitation `content` in `responses[key]`, if it answers with `field`.
fn accepted<'a>(responses: &'a InputResponses, key: &str, field: &str) -> Option<&'a Value> {
    let response = responses.get(key)?.as_object()?;
    if response.get("action")?.as_str()? != "accept" {
        return None;
    }
    response.get("content")?.as_object()?.get(field)
}

/// The text of a sampling answer in `responses[key]`.
fn sampled<'a>(responses: &'a InputResponses, key: &str) -> Option<&'a str> {
    let content = responses.get(key)?.get("content")?;
    let content = content
        .as_array()
        .and_then(|a| a.first())
        .unwrap_or(content);
    content.get("text")?.as_str()
}

/// The root URIs of a roots answer in `responses[key]`.
fn roots(responses: &InputResponses, key: &str) -> Option<Vec<String>> {
    let roots = responses.get(key)?.get("roots")?.as_array()?;
    Some(
        roots
            .iter()
            .filter_map(|r| r.get("uri")?.as_str().map(str::to_owned))
            .collect(),
    )
}

fn needs(requests: Vec<(&str, InputRequest)>, state: Option<String>) -> CallToolResponse {
    let requests: InputRequests = requests
        .into_iter()
        .map(|(k, r)| (k.to_owned(), r))
        .collect();
    CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), state))
}

/// The client's capabilities: per request (2026-07-28 `_meta`), else from its `initialize`.
fn declared_capabilities(context: &RequestContext<RoleServer>) -> Option<Value> {
    context
        .meta
        .get(CLIENT_CAPABILITIES_META)
        .cloned()
        .filter(|v| !v.is_null())
        .or_else(|| {
            let info = context.peer.peer_info()?;
            serde_json::to_value(&info.capabilities).ok()
        })
}

fn has_capability(capabilities: Option<&Value>, name: &str) -> bool {
    capabilities
        .and_then(|c| c.get(name))
        .is_some_and(|v| !v.is_null())
}

impl Fixtures {
    pub fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        Self {
            states: Mutex::new(HashMap::new()),
            subscriptions: Mutex::new(HashSet::new()),
            counter: AtomicU64::new(1),
            seed,
        }
    }

    /// A fresh opaque `requestState` handle for round `round` of `owner`, kept server-side.
    fn issue_state(&self, owner: &str, round: u32) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let handle = format!(
            "{:016x}{:016x}",
            self.seed.rotate_left(17) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            n
        );
        let mut states = lock(&self.states);
        if states.len() >= MAX_STATES {
            states.clear();
        }
        states.insert(handle.clone(), (owner.to_owned(), round));
        handle
    }

    /// Check an echoed `requestState`: it must be one this process issued for `owner`; its round.
    fn check_state(&self, owner: &str, state: Option<&str>) -> Result<Option<u32>, McpError> {
        let Some(state) = state else {
            return Ok(None);
        };
        match lock(&self.states).get(state) {
            Some((issued_for, round)) if issued_for == owner => Ok(Some(*round)),
            _ => Err(McpError::invalid_params(
                "requestState failed verification: this server did not issue it for this request",
                None,
            )),
        }
    }

    /// `resources/subscribe`.
    pub fn subscribe(&self, uri: &str) {
        lock(&self.subscriptions).insert(uri.to_owned());
    }

    /// `resources/unsubscribe`.
    pub fn unsubscribe(&self, uri: &str) {
        lock(&self.subscriptions).remove(uri);
    }

    /// `tools/call` of a fixture tool.
    pub async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(kind) = fixture(&request.name) else {
            return Err(McpError::invalid_params(
                format!("tool not found: {}", request.name),
                None,
            ));
        };
        let responses = request.input_responses.clone().unwrap_or_default();
        let state = request.request_state.as_deref();
        let name = request.name.as_ref();
        match kind {
            Fixture::SimpleText => text_result("This is a simple text response for testing."),
            Fixture::Image => Ok(CallToolResult::success(vec![ContentBlock::image(
                PNG_BASE64,
                "image/png",
            )])
            .into()),
            Fixture::Audio => Ok(CallToolResult::success(vec![ContentBlock::audio(
                WAV_BASE64,
                "audio/wav",
            )])
            .into()),
            Fixture::EmbeddedResource => from_json::<CallToolResult>(
                "embedded resource",
                json!({ "resultType": "complete", "content": [{ "type": "resource", "resource": {
                    "uri": "test://embedded-resource", "mimeType": "text/plain",
                    "text": "This is an embedded resource content." } }] }),
            )
            .map(Into::into),
            Fixture::MixedContent => from_json::<CallToolResult>(
                "mixed content",
                json!({ "resultType": "complete", "content": [
                    { "type": "text", "text": "Multiple content types test:" },
                    { "type": "image", "data": PNG_BASE64, "mimeType": "image/png" },
                    { "type": "resource", "resource": {
                        "uri": "test://mixed-content-resource", "mimeType": "application/json",
                        "text": json!({ "test": "data", "value": 123 }).to_string() } }
                ] }),
            )
            .map(Into::into),
            Fixture::Logging => {
                for (k, message) in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .into_iter()
                .enumerate()
                {
                    if k > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let param = LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        Value::String(message.to_owned()),
                    );
                    if let Err(error) = context.peer.notify_logging_message(param).await {
                        tracing::debug!(%error, "log message not sent");
                    }
                }
                text_result("Tool with logging executed successfully")
            }
            Fixture::Error => Ok(CallToolResult::error(vec![ContentBlock::text(
                "This tool intentionally returns an error for testing",
            )])
            .into()),
            Fixture::Progress => {
                let token = context.meta.get_progress_token();
                for (k, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if k > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if let Some(token) = &token {
                        let param = ProgressNotificationParam::new(token.clone(), progress)
                            .with_total(100.0);
                        if let Err(error) = context.peer.notify_progress(param).await {
                            tracing::debug!(%error, "progress not sent");
                        }
                    }
                }
                text_result("Tool with progress executed successfully")
            }
            Fixture::Sampling => self.sampling(request.arguments, context).await,
            Fixture::Elicitation => {
                let message = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("Please provide your information")
                    .to_owned();
                let params = json!({
                    "mode": "form",
                    "message": message,
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "username": { "type": "string", "description": "User's response" },
                            "email": { "type": "string", "description": "User's email address" }
                        },
                        "required": ["username", "email"]
                    }
                });
                self.elicit(params, "User response", context).await
            }
            Fixture::ElicitationDefaults => {
                let params = json!({
                    "mode": "form",
                    "message": "Please review and update the form fields with defaults",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "name": { "type": "string", "description": "User name", "default": "John Doe" },
                            "age": { "type": "integer", "description": "User age", "default": 30 },
                            "score": { "type": "number", "description": "User score", "default": 95.5 },
                            "status": { "type": "string", "description": "User status",
                                        "enum": ["active", "inactive", "pending"], "default": "active" },
                            "verified": { "type": "boolean", "description": "Verified", "default": true }
                        }
                    }
                });
                self.elicit(params, "Elicitation completed", context).await
            }
            Fixture::ElicitationEnums => {
                let params = json!({
                    "mode": "form",
                    "message": "Please choose from the options",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "untitledSingle": { "type": "string", "description": "Untitled single-select",
                                                "enum": ["option1", "option2", "option3"] },
                            "titledSingle": { "type": "string", "description": "Titled single-select",
                                              "oneOf": [
                                                  { "const": "value1", "title": "First Option" },
                                                  { "const": "value2", "title": "Second Option" },
                                                  { "const": "value3", "title": "Third Option" }
                                              ] },
                            "legacyEnum": { "type": "string", "description": "Legacy titled enum",
                                            "enum": ["opt1", "opt2", "opt3"],
                                            "enumNames": ["Option One", "Option Two", "Option Three"] },
                            "untitledMulti": { "type": "array", "description": "Untitled multi-select",
                                               "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
                            "titledMulti": { "type": "array", "description": "Titled multi-select",
                                             "items": { "anyOf": [
                                                 { "const": "value1", "title": "First Choice" },
                                                 { "const": "value2", "title": "Second Choice" },
                                                 { "const": "value3", "title": "Third Choice" }
                                             ] } }
                        }
                    }
                });
                self.elicit(params, "Elicitation completed", context).await
            }
            Fixture::JsonSchema => text_result(format!(
                "json_schema_2020_12_tool called with {}",
                Value::Object(request.arguments.unwrap_or_default())
            )),
            // test_streaming_elicitation (server-stateless) asks the same way: the question travels
            // in the result, never as a request on the response stream.
            Fixture::InputElicitation | Fixture::StreamingElicitation => {
                match accepted(&responses, "user_name", "name") {
                    Some(Value::String(who)) => text_result(format!("Hello, {who}!")),
                    _ => Ok(needs(
                        vec![(
                            "user_name",
                            elicit_input("What is your name?", "name", "string")?,
                        )],
                        None,
                    )),
                }
            }
            Fixture::InputSampling => match sampled(&responses, "capital_question") {
                Some(answer) => text_result(format!("Sampling answer: {answer}")),
                None => Ok(needs(
                    vec![(
                        "capital_question",
                        sampling_input("What is the capital of France?", 100)?,
                    )],
                    None,
                )),
            },
            Fixture::InputRoots => match roots(&responses, "client_roots") {
                Some(uris) => text_result(format!("Client roots: {}", uris.join(", "))),
                None => Ok(needs(vec![("client_roots", roots_input()?)], None)),
            },
            Fixture::InputRequestState | Fixture::InputTampered => {
                let round = self.check_state(name, state)?;
                if round == Some(1) && accepted(&responses, "confirm", "ok").is_some() {
                    return text_result("state-ok: the requestState was verified");
                }
                let confirm = input_request(
                    "elicitation/create",
                    json!({
                        "mode": "form",
                        "message": "Please confirm",
                        "requestedSchema": {
                            "type": "object",
                            "properties": { "ok": { "type": "boolean" } },
                            "required": ["ok"]
                        }
                    }),
                )?;
                Ok(needs(
                    vec![("confirm", confirm)],
                    Some(self.issue_state(name, 1)),
                ))
            }
            Fixture::InputMultiple => {
                let round = self.check_state(name, state)?;
                let who = accepted(&responses, "user_name", "name").and_then(Value::as_str);
                let greeting = sampled(&responses, "greeting");
                let client_roots = roots(&responses, "client_roots");
                if round == Some(1)
                    && let (Some(who), Some(greeting), Some(client_roots)) =
                        (who, greeting, client_roots)
                {
                    return text_result(format!(
                        "name={who}; greeting={greeting}; roots={}",
                        client_roots.join(", ")
                    ));
                }
                Ok(needs(
                    vec![
                        (
                            "user_name",
                            elicit_input("What is your name?", "name", "string")?,
                        ),
                        ("greeting", sampling_input("Generate a greeting", 50)?),
                        ("client_roots", roots_input()?),
                    ],
                    Some(self.issue_state(name, 1)),
                ))
            }
            Fixture::InputMultiRound => {
                let round = self.check_state(name, state)?;
                if round == Some(2)
                    && let Some(Value::String(color)) = accepted(&responses, "step2", "color")
                {
                    return text_result(format!("Both steps done; favorite color {color}"));
                }
                if round == Some(1) && accepted(&responses, "step1", "name").is_some() {
                    return Ok(needs(
                        vec![(
                            "step2",
                            elicit_input(
                                "Step 2: What is your favorite color?",
                                "color",
                                "string",
                            )?,
                        )],
                        Some(self.issue_state(name, 2)),
                    ));
                }
                Ok(needs(
                    vec![(
                        "step1",
                        elicit_input("Step 1: What is your name?", "name", "string")?,
                    )],
                    Some(self.issue_state(name, 1)),
                ))
            }
            Fixture::MissingCapability => {
                if !has_capability(declared_capabilities(context).as_ref(), "sampling") {
                    return Err(McpError::new(
                        rmcp::model::ErrorCode(MISSING_CAPABILITY_CODE),
                        "this tool needs the client's sampling capability",
                        Some(json!({ "requiredCapabilities": { "sampling": {} } })),
                    ));
                }
                text_result("The client declared sampling")
            }
            Fixture::LoggingTool => {
                // Protocol 2026-07-28: log only when the request asked for a level.
                if context.meta.get(LOG_LEVEL_META).is_some() {
                    let param = LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        Value::String("test_logging_tool ran".to_owned()),
                    );
                    if let Err(error) = context.peer.notify_logging_message(param).await {
                        tracing::debug!(%error, "log message not sent");
                    }
                }
                text_result("Logging tool executed")
            }
            Fixture::InputCapabilities => {
                if !responses.is_empty() {
                    return text_result("Received the requested input");
                }
                let declared = declared_capabilities(context);
                let declared = declared.as_ref();
                let mut requests = Vec::new();
                if has_capability(declared, "sampling") {
                    requests.push(("greeting", sampling_input("Generate a greeting", 50)?));
                }
                if has_capability(declared, "elicitation") {
                    requests.push((
                        "user_name",
                        elicit_input("What is your name?", "name", "string")?,
                    ));
                }
                if has_capability(declared, "roots") {
                    requests.push(("client_roots", roots_input()?));
                }
                if requests.is_empty() {
                    return text_result("The client declared nothing this tool could ask for");
                }
                Ok(needs(requests, None))
            }
        }
    }

    async fn sampling(
        &self,
        arguments: Option<JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let prompt = arguments
            .as_ref()
            .and_then(|a| a.get("prompt"))
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::invalid_params("test_sampling needs a prompt", None))?;
        let params: CreateMessageRequestParams = from_json(
            "sampling request",
            json!({
                "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
                "maxTokens": 100
            }),
        )?;
        match context.peer.create_message(params).await {
            Ok(result) => {
                let answer = serde_json::to_value(&result)
                    .ok()
                    .and_then(|v| {
                        let content = v.get("content")?.clone();
                        let content = content
                            .as_array()
                            .and_then(|a| a.first().cloned())
                            .unwrap_or(content);
                        content.get("text")?.as_str().map(str::to_owned)
                    })
                    .unwrap_or_default();
                text_result(format!("LLM response: {answer}"))
            }
            Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "sampling failed: {error}"
            ))])
            .into()),
        }
    }

    async fn elicit(
        &self,
        params: Value,
        label: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let params: ElicitRequestParams = from_json("elicitation request", params)?;
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match context.peer.send_request(request).await {
            Ok(ClientResult::ElicitResult(result)) => {
                let answer = serde_json::to_value(&result).unwrap_or(Value::Null);
                let action = answer.get("action").cloned().unwrap_or(Value::Null);
                let content = answer.get("content").cloned().unwrap_or(Value::Null);
                text_result(format!(
                    "{label}: action={}, content={content}",
                    action.as_str().unwrap_or("unknown")
                ))
            }
            Ok(other) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "not an elicitation result: {other:?}"
            ))])
            .into()),
            Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "elicitation failed: {error}"
            ))])
            .into()),
        }
    }

    /// `prompts/get` of a fixture prompt; `None` when `name` is not one.
    pub fn get_prompt(
        &self,
        request: &GetPromptRequestParams,
    ) -> Option<Result<GetPromptResponse, McpError>> {
        let argument = |key: &str| -> Option<String> {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let missing = |key: &str| {
            McpError::invalid_params(
                format!("prompt {} needs the argument {key}", request.name),
                None,
            )
        };
        let messages = match request.name.as_str() {
            "test_simple_prompt" => json!([{ "role": "user",
                "content": { "type": "text", "text": "This is a simple prompt for testing." } }]),
            PROMPT_WITH_ARGUMENTS => {
                let (Some(arg1), Some(arg2)) = (argument("arg1"), argument("arg2")) else {
                    return Some(Err(missing("arg1 and arg2")));
                };
                json!([{ "role": "user", "content": { "type": "text",
                    "text": format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'") } }])
            }
            "test_prompt_with_embedded_resource" => {
                let Some(uri) = argument("resourceUri") else {
                    return Some(Err(missing("resourceUri")));
                };
                json!([
                    { "role": "user", "content": { "type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain",
                        "text": "Embedded resource content for testing." } } },
                    { "role": "user", "content": { "type": "text",
                        "text": "Please process the embedded resource above." } }
                ])
            }
            "test_prompt_with_image" => json!([
                { "role": "user", "content": { "type": "image", "data": PNG_BASE64, "mimeType": "image/png" } },
                { "role": "user", "content": { "type": "text", "text": "Please analyze the image above." } }
            ]),
            INPUT_REQUIRED_PROMPT => {
                let responses = request.input_responses.clone().unwrap_or_default();
                let Some(Value::String(context)) = accepted(&responses, "user_context", "context")
                else {
                    let requests = match elicit_input(
                        "What context should the prompt use?",
                        "context",
                        "string",
                    ) {
                        Ok(r) => r,
                        Err(e) => return Some(Err(e)),
                    };
                    let requests: InputRequests = [("user_context".to_owned(), requests)]
                        .into_iter()
                        .collect();
                    return Some(Ok(GetPromptResponse::InputRequired(
                        InputRequiredResult::from_input_requests(requests),
                    )));
                };
                json!([{ "role": "user", "content": { "type": "text",
                    "text": format!("Use this context: {context}") } }])
            }
            _ => return None,
        };
        Some(
            from_json::<GetPromptResult>(
                "prompt",
                json!({ "resultType": "complete", "messages": messages }),
            )
            .map(Into::into),
        )
    }
}

impl Default for Fixtures {
    fn default() -> Self {
        Self::new()
    }
}
