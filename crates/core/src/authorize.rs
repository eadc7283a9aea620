//! `authorize` rules (SPEC §14): a CEL expression over the caller's claims (`jwt`) and the
//! request's MCP names (`mcp`), compiled once when the config is read and judged per request (and
//! per item when a list is filtered). Only `true` allows: a rule that is false, gives anything but
//! a bool, or fails at run time denies, and says why. It never does I/O and never reparses a rule.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, ExecutionError, ParseErrors, Program, Value};

/// The names a rule may start from: its two variables, CEL's type names (`type(x) == string`)
/// and the namespaces of the functions the rules' environment has (`strings.quote(x)`).
const KNOWN_NAMES: &[&str] = &[
    "jwt",
    "mcp",
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
    "optional",
    "optional_type",
    "strings",
    "lists",
    "math",
];

/// The environment every rule is compiled and judged in: CEL's standard library with the strings
/// (`split`, `lowerAscii`, …), lists and math extensions. Built once, shared by every rule.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Each extension declares overloads the standard library does not have; adding one can
    // only fail on a duplicate declaration, which the tests would show as a missing function.
    for extension in [
        cel::extensions::strings as fn(&mut Env) -> Result<(), cel::DeclarationError>,
        cel::extensions::lists,
        cel::extensions::math,
    ] {
        let _ = env.add_extension(extension);
    }
    Arc::new(env)
});

// === Rule ===

/// A compiled `authorize` rule. Cheap to clone (the program is shared); two rules are equal when
/// their source texts are, so a reload can tell a changed rule from an unchanged one.
#[derive(Clone)]
pub struct Rule {
    source: Arc<str>,
    program: Arc<Program>,
}

impl Rule {
    /// Compiles `source`. Besides CEL's own syntax errors, a rule that names anything but `jwt`,
    /// `mcp` (and CEL's type names and function namespaces) is refused here, as a CEL compiler
    /// that knows the declared variables would, rather than denying every request later.
    pub fn compile(source: &str) -> Result<Rule, CompileError> {
        if source.trim().is_empty() {
            return Err(CompileError::Empty);
        }
        let program = ENV
            .compile(source)
            .map_err(|e| CompileError::Syntax(syntax_message(source, &e)))?;
        if let Some(name) = first_unknown_name(program.expression(), &mut Vec::new()) {
            return Err(CompileError::UnknownName(name.to_owned()));
        }
        Ok(Rule {
            source: Arc::from(source),
            program: Arc::new(program),
        })
    }

    /// The rule as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the rule allows `request`: `Ok` only when it evaluates to `true`.
    pub fn check(&self, request: &Request<'_>) -> Result<(), Denied> {
        let scope = Scope {
            jwt: &request.jwt.0,
            mcp: mcp_map(request),
        };
        let mut context = Context::with_env(Arc::clone(&ENV));
        context.set_variable_resolver(&scope);
        match Value::resolve_val(self.program.expression(), &context) {
            Ok(value) => match value.downcast_ref::<CelBool>() {
                Some(b) if *b.inner() => Ok(()),
                Some(_) => Err(Denied::False),
                None => Err(Denied::NotABool {
                    kind: value.get_type().name().to_owned(),
                }),
            },
            Err(ExecutionError::NoSuchKey(key)) => Err(Denied::Failed {
                error: format!("no such key: {key}; guard what may be missing with has(...)"),
            }),
            Err(error) => Err(Denied::Failed {
                error: error.to_string(),
            }),
        }
    }

    /// [`Rule::check`] without the reason.
    pub fn allows(&self, request: &Request<'_>) -> bool {
        self.check(request).is_ok()
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Rule").field(&&*self.source).finish()
    }
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Rule {}

/// Why a rule did not compile. Display names the rule; [`CompileError::reason`] is the same
/// without the subject, for a config problem that names the rule by its path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the authorize rule {}", self.reason())]
pub enum CompileError {
    /// Nothing but whitespace.
    Empty,
    /// CEL's parser refused it: each of its errors with where it was found.
    Syntax(String),
    /// It names a variable a rule does not have.
    UnknownName(String),
}

impl CompileError {
    /// What is wrong and what to do, as a predicate: "is empty: …".
    pub fn reason(&self) -> String {
        match self {
            CompileError::Empty => {
                "is empty: write a CEL condition such as \"admin\" in jwt.groups".to_owned()
            }
            CompileError::Syntax(message) => format!("does not compile as CEL: {message}"),
            CompileError::UnknownName(name) => format!(
                "does not compile: it names {name:?}, which a rule does not have; a rule sees \
                 jwt (the token's claims) and mcp (server, method, tool.name, prompt.name, \
                 resource.uri)"
            ),
        }
    }
}

/// CEL's parse errors on one line, joined: where (line and column, as CEL counts them, from 1)
/// and what.
fn syntax_message(source: &str, errors: &ParseErrors) -> String {
    let one_line = !source.contains('\n');
    let parts: Vec<String> = errors
        .errors
        .iter()
        .map(|e| {
            let (line, column) = e.pos;
            if one_line {
                format!("at column {column}: {}", e.msg)
            } else {
                format!("at line {line}, column {column}: {}", e.msg)
            }
        })
        .collect();
    if parts.is_empty() {
        errors.to_string().replace('\n', " ")
    } else {
        parts.join("; ")
    }
}

/// The first name the expression starts from that is neither known nor bound by an enclosing
/// comprehension (`jwt.groups.exists(g, g == "admin")` binds `g`).
fn first_unknown_name<'e>(expr: &'e IdedExpr, bound: &mut Vec<&'e str>) -> Option<&'e str> {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => None,
        Expr::Ident(name) => {
            let known = name.starts_with('@')
                || bound.contains(&name.as_str())
                || KNOWN_NAMES.contains(&name.as_str());
            (!known).then_some(name.as_str())
        }
        Expr::Select(select) => first_unknown_name(&select.operand, bound),
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| &**t)
            .chain(&call.args)
            .find_map(|e| first_unknown_name(e, bound)),
        Expr::List(list) => list
            .elements
            .iter()
            .find_map(|e| first_unknown_name(e, bound)),
        Expr::Map(map) => map.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                first_unknown_name(&e.key, bound).or_else(|| first_unknown_name(&e.value, bound))
            }
            EntryExpr::StructField(f) => first_unknown_name(&f.value, bound),
        }),
        Expr::Struct(s) => s.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                first_unknown_name(&e.key, bound).or_else(|| first_unknown_name(&e.value, bound))
            }
            EntryExpr::StructField(f) => first_unknown_name(&f.value, bound),
        }),
        Expr::Comprehension(c) => {
            if let Some(name) = first_unknown_name(&c.iter_range, bound)
                .or_else(|| first_unknown_name(&c.accu_init, bound))
            {
                return Some(name);
            }
            let depth = bound.len();
            bound.push(&c.accu_var);
            bound.push(&c.iter_var);
            bound.extend(c.iter_var2.as_deref());
            let found = first_unknown_name(&c.loop_cond, bound)
                .or_else(|| first_unknown_name(&c.loop_step, bound))
                .or_else(|| first_unknown_name(&c.result, bound));
            bound.truncate(depth);
            found
        }
    }
}

// === Denied ===

/// Why a rule denied a request, for the log line that records the refusal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The rule evaluated to `false`.
    #[error("the authorize rule is false for this request")]
    False,
    /// The rule evaluated to something that is not a bool.
    #[error(
        "the authorize rule gave a {kind}, not a bool, so it denies: write a condition that is true or false"
    )]
    NotABool { kind: String },
    /// The rule failed at run time (a claim or a name it reads is missing, a type mismatch).
    #[error("the authorize rule failed at run time, so it denies: {error}")]
    Failed { error: String },
}

// === Request ===

/// What a rule judges: who calls, and what they ask of which server.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The caller's token claims (`jwt`); [`Claims::default`] (none) without auth.
    pub jwt: &'a Claims,
    /// The server's name in the config (`mcp.server`).
    pub server: &'a str,
    /// The MCP method (`mcp.method`): `tools/call`, `tools/list`, `prompts/get`, …
    pub method: &'a str,
    /// The tool, prompt or resource the request names, by its upstream name, if any.
    pub target: Target<'a>,
}

/// The one thing a request may name (`mcp.tool`, `mcp.prompt` or `mcp.resource`); a rule sees
/// only the key that applies, so `has(mcp.tool)` tells a tool's request from the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target<'a> {
    /// Nothing in particular (`tools/list`, `initialize`, …).
    #[default]
    None,
    /// `mcp.tool.name`: the upstream name of a tool.
    Tool(&'a str),
    /// `mcp.prompt.name`: the upstream name of a prompt.
    Prompt(&'a str),
    /// `mcp.resource.uri`: a resource's URI.
    Resource(&'a str),
}

/// A token's claims as a rule sees them (`jwt`), converted from JSON once per caller so that each
/// judgement only borrows them. Cheap to clone. Debug shows the claim names, never their values.
#[derive(Clone, Default)]
pub struct Claims(Arc<CelMap<'static>>);

impl Claims {
    /// The claims of a token's payload, converted faithfully: strings, numbers (an integer as
    /// `int`, or `uint` past `int`'s range; others as `double`), bools, lists, maps and null.
    pub fn new(claims: &serde_json::Map<String, serde_json::Value>) -> Self {
        Claims(Arc::new(object(claims)))
    }

    /// [`Claims::new`] of a JSON object; `None` for any other JSON value.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        value.as_object().map(Self::new)
    }
}

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<String> = self
            .0
            .keys()
            .map(|k| match k {
                CelMapKey::String(s) => s.to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        names.sort();
        f.debug_tuple("Claims").field(&names).finish()
    }
}

fn object(map: &serde_json::Map<String, serde_json::Value>) -> CelMap<'static> {
    let entries: HashMap<CelMapKey<'static>, Box<dyn Val>> = map
        .iter()
        .map(|(k, v)| (CelMapKey::from(k.clone()), json_value(v)))
        .collect();
    CelMap::from(entries)
}

/// One JSON value as a CEL value. serde_json's parser bounds the nesting, so the recursion is
/// bounded too.
fn json_value(value: &serde_json::Value) -> Box<dyn Val> {
    use serde_json::Value as Json;
    match value {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            (None, None) => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Json::String(s) => Box::new(CelString::from(s.clone())),
        Json::Array(items) => Box::new(CelList::from(
            items.iter().map(json_value).collect::<Vec<_>>(),
        )),
        Json::Object(map) => Box::new(object(map)),
    }
}

// === Evaluation ===

/// The two variables of one judgement: the caller's claims, borrowed, and `mcp`, built of
/// borrowed strings.
struct Scope<'r> {
    jwt: &'r CelMap<'static>,
    mcp: CelMap<'r>,
}

impl VariableResolver for Scope<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        match variable {
            "jwt" => Some(CowVal::Borrowed(self.jwt)),
            "mcp" => Some(CowVal::Borrowed(&self.mcp)),
            _ => None,
        }
    }
}

/// `mcp`: `server`, `method`, and the target's key when the request names one.
fn mcp_map<'r>(request: &Request<'r>) -> CelMap<'r> {
    let mut map: HashMap<CelMapKey<'r>, Box<dyn Val + 'r>> = HashMap::with_capacity(3);
    map.insert(
        CelMapKey::from("server"),
        Box::new(CelString::from(request.server)),
    );
    map.insert(
        CelMapKey::from("method"),
        Box::new(CelString::from(request.method)),
    );
    let target = match request.target {
        Target::None => None,
        Target::Tool(name) => Some(("tool", "name", name)),
        Target::Prompt(name) => Some(("prompt", "name", name)),
        Target::Resource(uri) => Some(("resource", "uri", uri)),
    };
    if let Some((key, field, value)) = target {
        let inner: HashMap<CelMapKey<'r>, Box<dyn Val + 'r>> = HashMap::from([(
            CelMapKey::from(field),
            Box::new(CelString::from(value)) as Box<dyn Val + 'r>,
        )]);
        map.insert(CelMapKey::from(key), Box::new(CelMap::from(inner)));
    }
    CelMap::from(map)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(source: &str) -> Rule {
        match Rule::compile(source) {
            Ok(rule) => rule,
            Err(e) => panic!("{source}: {e}"),
        }
    }

    fn claims(value: serde_json::Value) -> Claims {
        Claims::from_json(&value).unwrap_or_default()
    }

    fn alice() -> Claims {
        claims(json!({
            "iss": "https://id.example.com",
            "sub": "alice",
            "groups": ["admin", "dev"],
            "scope": "mcp:read mcp:write",
            "org": { "id": 42, "plan": "team" },
            "email_verified": true,
            "exp": 1_900_000_000u64,
            "ratio": 0.5,
            "nothing": null,
        }))
    }

    fn bob() -> Claims {
        claims(json!({ "sub": "bob", "groups": ["dev"], "scope": "mcp:read" }))
    }

    fn call<'a>(jwt: &'a Claims, tool: &'a str) -> Request<'a> {
        Request {
            jwt,
            server: "github",
            method: "tools/call",
            target: Target::Tool(tool),
        }
    }

    fn request<'a>(jwt: &'a Claims, method: &'a str, target: Target<'a>) -> Request<'a> {
        Request {
            jwt,
            server: "github",
            method,
            target,
        }
    }

    // --- What a rule sees ---

    #[test]
    fn a_rule_allows_by_a_claim_in_a_list() {
        let admins = rule(r#""admin" in jwt.groups"#);
        assert!(admins.allows(&call(&alice(), "delete_repo")));
        assert_eq!(
            admins.check(&call(&bob(), "delete_repo")),
            Err(Denied::False)
        );
    }

    #[test]
    fn a_rule_allows_by_subject() {
        let only_alice = rule(r#"jwt.sub == "alice""#);
        assert!(only_alice.allows(&call(&alice(), "x")));
        assert!(!only_alice.allows(&call(&bob(), "x")));
    }

    #[test]
    fn a_rule_reads_a_scope_string_with_the_strings_extension() {
        let writers = rule(r#""mcp:write" in jwt.scope.split(" ")"#);
        assert!(writers.allows(&call(&alice(), "x")));
        assert!(!writers.allows(&call(&bob(), "x")));
        let contains = rule(r#"jwt.scope.contains("mcp:write")"#);
        assert!(contains.allows(&call(&alice(), "x")));
        assert!(!contains.allows(&call(&bob(), "x")));
    }

    #[test]
    fn nested_claims_numbers_bools_and_null_are_converted_faithfully() {
        for source in [
            "jwt.org.id == 42",
            r#"jwt.org.plan == "team""#,
            "jwt.email_verified",
            "jwt.exp > 1000",
            "jwt.ratio == 0.5",
            "jwt.nothing == null",
            "size(jwt.groups) == 2",
            r#"jwt.groups[0] == "admin""#,
            r#"has(jwt.org) && !has(jwt.team)"#,
            r#"jwt.groups.exists(g, g.startsWith("ad"))"#,
            r#"jwt.groups.all(g, g.size() >= 3)"#,
            r#"type(jwt.sub) == string"#,
        ] {
            assert!(rule(source).allows(&call(&alice(), "x")), "{source}");
        }
    }

    #[test]
    fn a_rule_allows_by_tool_name() {
        let readers = rule(r#"mcp.tool.name.startsWith("read_")"#);
        assert!(readers.allows(&call(&bob(), "read_file")));
        assert_eq!(
            readers.check(&call(&bob(), "write_file")),
            Err(Denied::False)
        );
    }

    #[test]
    fn a_rule_sees_the_server_and_the_method() {
        let lists = rule(r#"mcp.server == "github" && mcp.method.endsWith("/list")"#);
        assert!(lists.allows(&request(&bob(), "tools/list", Target::None)));
        assert!(lists.allows(&request(&bob(), "prompts/list", Target::None)));
        assert!(!lists.allows(&call(&bob(), "read_file")));
        let bob = bob();
        let elsewhere = Request {
            server: "slack",
            ..request(&bob, "tools/list", Target::None)
        };
        assert!(!lists.allows(&elsewhere));
    }

    #[test]
    fn only_the_target_that_applies_is_present() {
        let tool = rule("has(mcp.tool) && !has(mcp.prompt) && !has(mcp.resource)");
        assert!(tool.allows(&call(&bob(), "x")));
        let prompt = rule(r#"has(mcp.prompt) && mcp.prompt.name == "summary" && !has(mcp.tool)"#);
        assert!(prompt.allows(&request(&bob(), "prompts/get", Target::Prompt("summary"))));
        let resource = rule(r#"mcp.resource.uri.startsWith("file:///public/")"#);
        assert!(resource.allows(&request(
            &bob(),
            "resources/read",
            Target::Resource("file:///public/a.txt")
        )));
        assert!(!resource.allows(&request(
            &bob(),
            "resources/read",
            Target::Resource("file:///etc/passwd")
        )));
        let none = rule("!has(mcp.tool) && !has(mcp.prompt) && !has(mcp.resource)");
        assert!(none.allows(&request(&bob(), "tools/list", Target::None)));
    }

    #[test]
    fn a_guard_with_has_lets_requests_without_a_tool_through() {
        let guarded = rule(r#"has(mcp.tool) ? mcp.tool.name != "delete_repo" : true"#);
        assert!(guarded.allows(&request(&bob(), "tools/list", Target::None)));
        assert!(guarded.allows(&call(&bob(), "read_file")));
        assert!(!guarded.allows(&call(&bob(), "delete_repo")));
    }

    // --- Anything but true denies ---

    #[test]
    fn a_rule_that_errors_at_run_time_denies_and_says_why() {
        // No tool on a list request: `mcp.tool` is missing.
        let unguarded = rule(r#"mcp.tool.name == "x""#);
        let denied = unguarded.check(&request(&bob(), "tools/list", Target::None));
        match denied {
            Err(Denied::Failed { error }) => assert_eq!(
                error,
                "no such key: tool; guard what may be missing with has(...)"
            ),
            other => panic!("{other:?}"),
        }
        // A claim the token lacks.
        let missing_claim = rule(r#""admin" in jwt.roles"#);
        assert!(matches!(
            missing_claim.check(&call(&alice(), "x")),
            Err(Denied::Failed { .. })
        ));
        // No auth: no claims at all.
        let none = Claims::default();
        assert!(matches!(
            rule(r#"jwt.sub == "alice""#).check(&call(&none, "x")),
            Err(Denied::Failed { .. })
        ));
        // A type mismatch.
        assert!(matches!(
            rule("jwt.sub > 3").check(&call(&alice(), "x")),
            Err(Denied::Failed { .. })
        ));
        let message = Denied::Failed {
            error: "no such key: roles".into(),
        }
        .to_string();
        assert_eq!(
            message,
            "the authorize rule failed at run time, so it denies: no such key: roles"
        );
    }

    #[test]
    fn a_rule_that_gives_anything_but_a_bool_denies() {
        for (source, kind) in [
            ("jwt.sub", "string"),
            ("1", "int"),
            ("jwt.groups", "list"),
            ("null", "null_type"),
        ] {
            match rule(source).check(&call(&alice(), "x")) {
                Err(Denied::NotABool { kind: got }) => assert_eq!(got, kind, "{source}"),
                other => panic!("{source}: {other:?}"),
            }
        }
        assert_eq!(
            Denied::NotABool {
                kind: "string".into()
            }
            .to_string(),
            "the authorize rule gave a string, not a bool, so it denies: write a condition that is true or false"
        );
    }

    #[test]
    fn or_with_an_error_on_one_side_follows_cel() {
        // CEL's `||` is true when either side is true, even if the other errs.
        let rule = rule(r#"jwt.sub == "alice" || "admin" in jwt.roles"#);
        assert!(rule.allows(&call(&alice(), "x")));
        assert!(!rule.allows(&call(&bob(), "x")));
    }

    // --- Compiling ---

    #[test]
    fn a_rule_that_does_not_parse_is_an_error_naming_the_problem() {
        let error = Rule::compile(r#"jwt.sub == "alice"#).expect_err("unterminated string");
        assert!(matches!(error, CompileError::Syntax(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            message.starts_with("the authorize rule does not compile as CEL: at column "),
            "{message}"
        );
        assert!(!message.contains('\n'), "{message}");
        let error = Rule::compile("a b").expect_err("two words");
        assert_eq!(
            error.reason(),
            "does not compile as CEL: at column 3: Syntax error: extraneous input 'b' expecting <EOF>"
        );
        let error = Rule::compile("jwt.sub == \"a\" &&\n  ").expect_err("two lines");
        assert!(error.reason().contains("at line "), "{error}");
    }

    #[test]
    fn an_empty_rule_is_an_error() {
        for source in ["", "  \n"] {
            assert_eq!(Rule::compile(source), Err(CompileError::Empty));
        }
    }

    #[test]
    fn a_rule_that_names_an_unknown_variable_does_not_compile() {
        assert_eq!(
            Rule::compile(r#"mpc.tool.name == "x""#),
            Err(CompileError::UnknownName("mpc".into()))
        );
        assert_eq!(
            Rule::compile(r#"jwt.groups.exists(g, g == role)"#),
            Err(CompileError::UnknownName("role".into()))
        );
        assert!(
            CompileError::UnknownName("mpc".into())
                .to_string()
                .contains("a rule sees jwt (the token's claims) and mcp")
        );
        // Names a comprehension binds are known inside it only.
        assert!(Rule::compile(r#"jwt.groups.exists(g, g == "admin") && g"#).is_err());
        assert!(Rule::compile(r#"jwt.groups.map(g, g.upperAscii()).size() > 0"#).is_ok());
        assert!(Rule::compile(r#"[1, 2].all(i, [3].exists(j, i < j))"#).is_ok());
        assert!(Rule::compile(r#"{"a": jwt.sub}.a == strings.quote("x")"#).is_ok());
    }

    #[test]
    fn rules_compare_by_their_source_and_show_it_in_debug() {
        let a = rule("jwt.sub == 'a'");
        assert_eq!(a, rule("jwt.sub == 'a'"));
        assert_ne!(a, rule("jwt.sub == 'b'"));
        assert_eq!(a.source(), "jwt.sub == 'a'");
        assert_eq!(format!("{a:?}"), r#"Rule("jwt.sub == 'a'")"#);
    }

    #[test]
    fn claims_show_their_names_but_never_their_values() {
        let shown = format!("{:?}", bob());
        assert_eq!(shown, r#"Claims(["groups", "scope", "sub"])"#);
        assert!(Claims::from_json(&json!(["not", "an", "object"])).is_none());
    }

    #[test]
    fn a_compiled_rule_is_shared_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Rule>();
        send_sync::<Claims>();
    }
}
