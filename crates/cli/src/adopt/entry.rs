//! One server entry, format-neutral: decides whether it is a stdio server, a URL server or one
//! already wrapped, and rewrites it through the [`EntryMap`] of its format. It never reads or
//! writes files, and never drops a key it does not name.
//!
//! Undo needs no backup: a wrapped entry's `args` are exactly `wrap -- CMD ARGS...` or
//! `wrap --url|--sse URL [--header-from-env NAME=VAR]...`, so the original command, arguments, URL
//! and transport are read back from them, and each header's value from the entry's `env` (where
//! adopt moved it, so that a token never shows on a command line). Adopt writes `command` and
//! `args` (in place of a URL server's URL and headers), sets an existing `type` to `"stdio"` and
//! adds to `env`; it touches no other key, so cwd, unknown keys and the rest of env need no
//! restoring. Undo rebuilds what adopt replaced by these rules:
//!
//! - `command`, and `args` when there are any (none: no `args` key);
//! - the URL under `url` for `--sse`; for `--url` under `url` when the entry has a `type` key, else
//!   under the format's streamable-HTTP key (Gemini CLI's `httpUrl`, `url` elsewhere): Gemini
//!   CLI's two forms, `{"httpUrl": U}` and `{"type": "http", "url": U}`, each come back as written;
//! - an existing `type` as `"sse"` for `--sse`, `"http"` for `--url`;
//! - the headers (under the format's headers key) when there are any;
//! - `env` without the variables adopt added, and no `env` key when that leaves it empty.
//!
//! Where these rules would not give an entry back as it was, adopt notes the difference in the
//! entry's `env`, as the variable [`UNDO_VAR`] (words `args=[]`, `headers={}`, `env={}`,
//! `type=VALUE`, `url-key=KEY`), which undo reads and removes. Only such entries carry it (an
//! empty `args`, an empty headers map, an empty `env` adopt writes into, Cursor's `"type":
//! "streamable-http"`, Gemini CLI's `httpUrl` beside a `type`), and `env` is a key every host
//! takes on a command's entry, so a wrapped entry holds no key a host would reject. An entry they
//! could not give back even so (its env already holds that variable; a URL server with `args`) is
//! left as is, and adopt says why.

/// A value adopt writes into an entry.
#[derive(Clone, Debug, PartialEq)]
pub enum NewValue {
    Str(String),
    List(Vec<String>),
    Map(Vec<(String, String)>),
}

/// The keys of one format's server entry.
#[derive(Clone, Copy, Debug)]
pub struct Keys {
    /// The program: `command`, or `path` inside Zed's older `command` object.
    pub command: &'static str,
    /// The HTTP headers of a URL server: `headers`, or Codex's `http_headers`.
    pub headers: &'static str,
    /// Keys that hold headers adopt cannot carry into `wrap` (Codex reads them from
    /// its own environment): an entry with one of them is left alone.
    pub env_headers: &'static [&'static str],
    /// The key of a streamable-HTTP server's URL: `url`, or Gemini CLI's `httpUrl` (which undo
    /// writes only for an entry with no `type` key: see the module's rules).
    pub http_url: &'static str,
    /// A `url` is an SSE server's unless `"type": "http"` says otherwise (Gemini CLI); else it
    /// is a streamable-HTTP server's unless `"type": "sse"` says otherwise.
    pub url_is_sse: bool,
}

/// What one format's entry offers adopt: typed reads and position-keeping writes.
pub trait EntryMap {
    /// `Ok(None)` when absent, `Err` with the type found when present but not a string.
    fn get_str(&self, key: &str) -> Result<Option<String>, String>;
    fn get_list(&self, key: &str) -> Result<Option<Vec<String>>, String>;
    fn get_map(&self, key: &str) -> Result<Option<Vec<(String, String)>>, String>;
    fn contains(&self, key: &str) -> bool;
    /// Set `key`, keeping its place (and its surrounding formatting) when it exists.
    fn set(&mut self, key: &str, value: NewValue);
    /// Remove every key of `remove` and insert `insert` where the first present key of `remove`
    /// stood (at the end when none was present).
    fn replace(&mut self, remove: &[&str], insert: Vec<(String, NewValue)>);
}

/// What happened to one entry.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Changed(&'static str),
    Unchanged(&'static str),
    Skipped(String),
}

/// How adopt recognises and writes the supervisor's own command.
pub struct Binary<'a> {
    /// The command written by adopt.
    pub path: &'a str,
    /// clap's definition of our command line: which of `wrap`'s flags take a value.
    pub command_line: &'a clap::Command,
}

impl Binary<'_> {
    /// An entry runs through the supervisor when its command is the binary adopt writes, or any
    /// program named `mcp-supervisor`, and its first argument is `wrap`.
    fn is_ours(&self, command: &str, args: &[String]) -> bool {
        let name = std::path::Path::new(command)
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or(command);
        let ours = command == self.path
            || name == "mcp-supervisor"
            || name == "mcp-supervisor.exe"
            || std::path::Path::new(self.path)
                .file_name()
                .and_then(|n| n.to_str())
                == Some(name);
        ours && args.first().map(String::as_str) == Some("wrap")
    }
}

/// The server an entry starts or reaches, or a `wrap` argument list fronts.
#[derive(Debug, PartialEq)]
enum Server {
    Stdio {
        command: String,
        args: Vec<String>,
    },
    Url {
        url: String,
        headers: Vec<Header>,
        /// A legacy HTTP+SSE server (`wrap --sse`), not streamable HTTP (`wrap --url`).
        sse: bool,
    },
}

/// One HTTP header of a URL server.
#[derive(Debug, PartialEq)]
enum Header {
    /// `NAME: VALUE`, as in the host's headers (or a hand-written `--header`).
    Value(String, String),
    /// `--header-from-env NAME=VAR`: the value is the entry's `env.VAR`.
    FromEnv(String, String),
}

/// Where adopt puts header values: `MCP_HEADER_` and the name in capitals, `_` for the rest.
fn header_var(name: &str, env: &[(String, String)]) -> String {
    let base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    let base = format!("MCP_HEADER_{base}");
    let mut var = base.clone();
    let mut n = 2;
    while env.iter().any(|(k, _)| *k == var) {
        var = format!("{base}_{n}");
        n += 1;
    }
    var
}

/// What an entry is, read once.
enum Kind {
    Plain(Server),
    Wrapped(Vec<String>),
}

fn kind(map: &dyn EntryMap, keys: &Keys, binary: &Binary) -> Result<Kind, String> {
    let command = map.get_str(keys.command)?;
    let args = map.get_list("args")?.unwrap_or_default();
    if let Some(command) = command {
        if binary.is_ours(&command, &args) {
            return Ok(Kind::Wrapped(args));
        }
        return Ok(Kind::Plain(Server::Stdio { command, args }));
    }
    let http_url = match keys.http_url {
        "url" => None,
        key => map.get_str(key)?,
    };
    let url = map.get_str("url")?;
    if http_url.is_some() && url.is_some() {
        return Err(format!(
            "it has both `{}` and `url`; keep the one the host should use and run adopt again",
            keys.http_url
        ));
    }
    let kind = map.get_str("type")?;
    let (url, sse) = match (http_url, url) {
        (Some(url), _) => (url, false),
        (None, Some(url)) => {
            let sse = match kind.as_deref() {
                Some("sse") => true,
                Some("http" | "streamable-http") => false,
                _ => keys.url_is_sse,
            };
            (url, sse)
        }
        (None, None) => return Err(format!("it has neither `{}` nor `url`", keys.command)),
    };
    if let Some(key) = keys.env_headers.iter().find(|key| map.contains(key)) {
        return Err(format!(
            "its `{key}` is read from the host's own environment, which `wrap` does not get; \
             wrap it by hand with `wrap --url URL --header \"NAME: VALUE\"`"
        ));
    }
    let headers = map.get_map(keys.headers)?.unwrap_or_default();
    let headers = headers
        .into_iter()
        .map(|(name, value)| Header::Value(name, value))
        .collect();
    Ok(Kind::Plain(Server::Url { url, headers, sse }))
}

/// The env variable in which adopt notes what undo's rules alone would not give back.
pub const UNDO_VAR: &str = "MCP_SUPERVISOR_UNDO";

/// What undo's rules alone would not give back of one entry: the words of [`UNDO_VAR`].
#[derive(Debug, Default, PartialEq)]
struct Notes {
    /// `args=[]`: it had an empty `args` (the rule writes `args` only when there are some).
    empty_args: bool,
    /// `headers={}`: it had an empty headers map (the rule writes headers only when there are
    /// some).
    empty_headers: bool,
    /// `env={}`: it had an empty `env` that adopt wrote into (the rule removes an `env` it leaves
    /// empty).
    empty_env: bool,
    /// `type=VALUE`: its `type` was not the one its transport gives (`"streamable-http"`).
    kind: Option<String>,
    /// `url-key=KEY`: its URL stood under KEY, not under the key the rule gives (Gemini CLI's
    /// `httpUrl` beside a `type`).
    url_key: Option<String>,
}

impl Notes {
    fn is_empty(&self) -> bool {
        *self == Notes::default()
    }

    fn render(&self) -> String {
        let mut words = Vec::new();
        for (set, word) in [
            (self.empty_args, "args=[]"),
            (self.empty_headers, "headers={}"),
            (self.empty_env, "env={}"),
        ] {
            if set {
                words.push(word.to_owned());
            }
        }
        if let Some(kind) = &self.kind {
            words.push(format!("type={kind}"));
        }
        if let Some(key) = &self.url_key {
            words.push(format!("url-key={key}"));
        }
        words.join(" ")
    }

    fn parse(text: &str) -> Result<Notes, String> {
        let mut notes = Notes::default();
        for word in text.split_whitespace() {
            match word.split_once('=') {
                Some(("args", "[]")) => notes.empty_args = true,
                Some(("headers", "{}")) => notes.empty_headers = true,
                Some(("env", "{}")) => notes.empty_env = true,
                Some(("type", kind)) => notes.kind = Some(kind.to_owned()),
                Some(("url-key", key)) => notes.url_key = Some(key.to_owned()),
                _ => {
                    return Err(format!(
                        "its env.{UNDO_VAR} holds `{word}`, which adopt does not write; restore \
                         it by hand"
                    ));
                }
            }
        }
        Ok(notes)
    }
}

/// The key undo gives a URL: `url` for SSE; for streamable HTTP `url` beside a `type` key, else
/// the format's own (Gemini CLI's `httpUrl`).
fn url_key(keys: &Keys, sse: bool, typed: bool) -> &'static str {
    if sse || typed { "url" } else { keys.http_url }
}

/// The `type` undo writes back where the entry has one.
fn transport_type(sse: bool) -> &'static str {
    if sse { "sse" } else { "http" }
}

/// Rewrite one entry to run through `wrap`. A wrapped entry is left alone.
pub fn adopt(map: &mut dyn EntryMap, keys: &Keys, binary: &Binary) -> Outcome {
    match kind(map, keys, binary) {
        Err(reason) => Outcome::Skipped(reason),
        Ok(Kind::Wrapped(_)) => Outcome::Unchanged("already goes through mcp-supervisor"),
        Ok(Kind::Plain(server)) => match wrap(map, keys, binary, server) {
            Ok(()) => Outcome::Changed("wrapped"),
            Err(reason) => Outcome::Skipped(reason),
        },
    }
}

/// Everything is read and checked before the first write, so that an entry left alone is left
/// untouched.
fn wrap(
    map: &mut dyn EntryMap,
    keys: &Keys,
    binary: &Binary,
    server: Server,
) -> Result<(), String> {
    // An `env` adopt does not write into may hold anything.
    let read_env = map.get_map("env");
    let mut env = match &read_env {
        Ok(env) => env.clone().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    if env.iter().any(|(name, _)| name == UNDO_VAR) {
        return Err(format!(
            "its env holds {UNDO_VAR}, which undo would take for its own note; rename it and run \
             adopt again"
        ));
    }
    let env_was_empty = matches!(&read_env, Ok(Some(env)) if env.is_empty());
    let mut notes = Notes::default();
    let mut moved = false;
    let is_url = matches!(server, Server::Url { .. });
    let wrapped = match server {
        Server::Stdio { command, args } => {
            notes.empty_args = args.is_empty() && map.contains("args");
            let mut wrapped = vec!["wrap".to_owned(), "--".to_owned(), command];
            wrapped.extend(args);
            wrapped
        }
        Server::Url { url, headers, sse } => {
            if map.contains("args") {
                return Err(
                    "it has `args` beside its URL, which adopt would write over; remove them and \
                     run adopt again"
                        .into(),
                );
            }
            let kind = map.get_str("type")?;
            let held = if keys.http_url != "url" && map.contains(keys.http_url) {
                keys.http_url
            } else {
                "url"
            };
            if held != url_key(keys, sse, kind.is_some()) {
                notes.url_key = Some(held.to_owned());
            }
            if let Some(kind) = kind
                && kind != transport_type(sse)
            {
                if kind.contains(char::is_whitespace) {
                    return Err(format!(
                        "its `type` {kind:?} holds a space, which undo could not give back"
                    ));
                }
                notes.kind = Some(kind);
            }
            notes.empty_headers = headers.is_empty() && map.contains(keys.headers);
            let flag = if sse { "--sse" } else { "--url" };
            let mut wrapped = vec!["wrap".to_owned(), flag.to_owned(), url];
            for header in headers {
                let (name, var) = match header {
                    Header::Value(name, value) => {
                        let var = header_var(&name, &env);
                        env.push((var.clone(), value));
                        (name, var)
                    }
                    Header::FromEnv(name, var) => (name, var),
                };
                moved = true;
                wrapped.push("--header-from-env".to_owned());
                wrapped.push(format!("{name}={var}"));
            }
            wrapped
        }
    };
    let writes_env = moved || !notes.is_empty();
    if writes_env {
        read_env?;
    }
    notes.empty_env = writes_env && env_was_empty;
    if is_url {
        map.replace(
            &["url", keys.http_url, keys.headers],
            vec![
                (
                    keys.command.to_owned(),
                    NewValue::Str(binary.path.to_owned()),
                ),
                ("args".to_owned(), NewValue::List(wrapped)),
            ],
        );
    } else {
        map.set(keys.command, NewValue::Str(binary.path.to_owned()));
        map.set("args", NewValue::List(wrapped));
    }
    if !notes.is_empty() {
        env.push((UNDO_VAR.to_owned(), notes.render()));
    }
    if writes_env {
        map.set("env", NewValue::Map(env));
    }
    if is_url && map.contains("type") {
        map.set("type", NewValue::Str("stdio".to_owned()));
    }
    Ok(())
}

/// Restore one wrapped entry from its `wrap` arguments. An entry that is not wrapped is left alone.
pub fn undo(map: &mut dyn EntryMap, keys: &Keys, binary: &Binary) -> Outcome {
    let args = match kind(map, keys, binary) {
        Ok(Kind::Wrapped(args)) => args,
        Ok(_) | Err(_) => return Outcome::Unchanged("does not go through mcp-supervisor"),
    };
    match unwrap_args(&args, binary.command_line).and_then(|server| restore(map, keys, server)) {
        Ok(()) => Outcome::Changed("restored"),
        Err(reason) => Outcome::Skipped(reason),
    }
}

/// The rules of the module's doc, then the notes of [`UNDO_VAR`]; everything is read and checked
/// before the first write.
fn restore(map: &mut dyn EntryMap, keys: &Keys, server: Server) -> Result<(), String> {
    // An `env` adopt did not write into may hold anything.
    let read_env = map.get_map("env");
    let mut env = match &read_env {
        Ok(env) => env.clone().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let mut env_changed = false;
    let notes = match env.iter().position(|(name, _)| name == UNDO_VAR) {
        Some(at) => {
            env_changed = true;
            Notes::parse(&env.remove(at).1)?
        }
        None => Notes::default(),
    };
    match server {
        Server::Stdio { command, args } => {
            map.set(keys.command, NewValue::Str(command));
            if args.is_empty() && !notes.empty_args {
                map.replace(&["args"], Vec::new());
            } else {
                map.set("args", NewValue::List(args));
            }
        }
        Server::Url { url, headers, sse } => {
            let mut values = Vec::new();
            for header in headers {
                match header {
                    Header::Value(name, value) => values.push((name, value)),
                    Header::FromEnv(name, var) => {
                        if let Err(reason) = &read_env {
                            return Err(reason.clone());
                        }
                        let Some(at) = env.iter().position(|(k, _)| *k == var) else {
                            return Err(format!(
                                "its header {name} comes from env.{var}, which it does not have; \
                                 restore it by hand"
                            ));
                        };
                        values.push((name, env.remove(at).1));
                        env_changed = true;
                    }
                }
            }
            let typed = map.contains("type");
            let key = match notes.url_key {
                None => url_key(keys, sse, typed).to_owned(),
                Some(key) if key == "url" || key == keys.http_url => key,
                Some(key) => {
                    return Err(format!(
                        "its env.{UNDO_VAR} puts the URL under `{key}`, which is no URL key of \
                         this host; restore it by hand"
                    ));
                }
            };
            let mut insert = vec![(key, NewValue::Str(url))];
            if !values.is_empty() || notes.empty_headers {
                insert.push((keys.headers.to_owned(), NewValue::Map(values)));
            }
            map.replace(&[keys.command, "args"], insert);
            if typed {
                let kind = notes.kind.unwrap_or_else(|| transport_type(sse).to_owned());
                map.set("type", NewValue::Str(kind));
            }
        }
    }
    if env_changed {
        if env.is_empty() && !notes.empty_env {
            map.replace(&["env"], Vec::new());
        } else {
            map.set("env", NewValue::Map(env));
        }
    }
    Ok(())
}

/// Whether `flag` (`--max-attempts`) is one of `wrap`'s flags (or a global one) and takes a value,
/// read from clap's own definition of the command line, so that every flag wrap has is known here.
/// Any of them other than the URL and the headers (added by hand) is dropped on undo, since the
/// original entry had no such thing.
fn wrap_flag(cli: &clap::Command, flag: &str) -> Option<bool> {
    let long = flag.strip_prefix("--")?;
    let wrap = cli.find_subcommand("wrap")?;
    wrap.get_arguments()
        .chain(cli.get_arguments().filter(|arg| arg.is_global_set()))
        .find(|arg| arg.get_long() == Some(long))
        .map(|arg| arg.get_action().takes_values())
}

fn unwrap_args(args: &[String], cli: &clap::Command) -> Result<Server, String> {
    let mut url = None;
    let mut sse = false;
    let mut headers = Vec::new();
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        if flag == "--" {
            let mut command = rest.cloned();
            let Some(program) = command.next() else {
                return Err("its `wrap --` has no command after it; restore it by hand".into());
            };
            return Ok(Server::Stdio {
                command: program,
                args: command.collect(),
            });
        }
        match wrap_flag(cli, flag) {
            Some(true) => {}
            Some(false) => continue,
            None => {
                return Err(format!(
                    "its wrap arguments hold `{arg}`, which adopt does not know; restore it by \
                     hand"
                ));
            }
        }
        let Some(value) = inline.or_else(|| rest.next().cloned()) else {
            return Err(format!(
                "its wrap flag `{flag}` has no value; restore it by hand"
            ));
        };
        if flag == "--url" || flag == "--sse" {
            url = Some(value);
            sse = flag == "--sse";
        } else if flag == "--header" {
            let Some((name, value)) = value.split_once(':') else {
                return Err(
                    "one of its --header values is not `NAME: VALUE`; restore it by hand".into(),
                );
            };
            headers.push(Header::Value(
                name.trim().to_owned(),
                value.trim_start().to_owned(),
            ));
        } else if flag == "--header-from-env" {
            let Some((name, var)) = value.split_once('=') else {
                return Err(format!(
                    "its --header-from-env `{value}` is not `NAME=VAR`; restore it by hand"
                ));
            };
            headers.push(Header::FromEnv(name.to_owned(), var.to_owned()));
        }
    }
    match url {
        Some(url) => Ok(Server::Url { url, headers, sse }),
        None => Err(
            "its wrap arguments have neither `--` nor `--url` nor `--sse`; restore it by hand"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    /// [`unwrap_args`] with our command line as clap defines it.
    fn unwrap(args: &[String]) -> Result<Server, String> {
        unwrap_args(args, &<crate::cli::Cli as clap::CommandFactory>::command())
    }

    #[test]
    fn wrap_arguments_give_back_the_command_or_url_and_headers() {
        assert_eq!(
            unwrap(&strings(&["wrap", "--", "npx", "-y", "pkg", "--", "x"])),
            Ok(Server::Stdio {
                command: "npx".into(),
                args: strings(&["-y", "pkg", "--", "x"]),
            })
        );
        assert_eq!(
            unwrap(&strings(&[
                "wrap",
                "--max-attempts",
                "3",
                "--url=http://h/mcp",
                "--header",
                "Authorization: Bearer a:b",
            ])),
            Ok(Server::Url {
                url: "http://h/mcp".into(),
                headers: vec![Header::Value("Authorization".into(), "Bearer a:b".into())],
                sse: false,
            })
        );
        assert_eq!(
            unwrap(&strings(&["wrap", "--sse", "http://h/sse"])),
            Ok(Server::Url {
                url: "http://h/sse".into(),
                headers: Vec::new(),
                sse: true,
            })
        );
        // Every flag wrap has, added by hand, is dropped (its value with it).
        assert_eq!(
            unwrap(&strings(&[
                "wrap",
                "--pin",
                "block",
                "--on-demand",
                "--tool-exposure=search",
                "--log-level",
                "debug",
                "--sse",
                "http://h/sse",
            ])),
            Ok(Server::Url {
                url: "http://h/sse".into(),
                headers: Vec::new(),
                sse: true,
            })
        );
        assert!(unwrap(&strings(&["wrap", "--weird", "--", "x"])).is_err());
        assert!(unwrap(&strings(&["wrap", "--"])).is_err());
    }

    #[test]
    fn notes_read_back_as_written_and_an_unknown_word_is_refused() {
        let notes = Notes {
            empty_args: true,
            empty_headers: true,
            empty_env: true,
            kind: Some("streamable-http".into()),
            url_key: Some("httpUrl".into()),
        };
        let text = notes.render();
        assert_eq!(
            text,
            "args=[] headers={} env={} type=streamable-http url-key=httpUrl"
        );
        assert_eq!(Notes::parse(&text), Ok(notes));
        assert_eq!(Notes::parse(""), Ok(Notes::default()));
        assert!(Notes::default().is_empty());
        assert!(Notes::parse("args=[] cwd=/tmp").is_err());
    }

    #[test]
    fn the_url_key_follows_the_transport_the_type_key_and_the_format() {
        let gemini = Keys {
            command: "command",
            headers: "headers",
            env_headers: &[],
            http_url: "httpUrl",
            url_is_sse: true,
        };
        let other = Keys {
            http_url: "url",
            url_is_sse: false,
            ..gemini
        };
        // Gemini CLI: {"httpUrl": U}, {"type": "http", "url": U}, {"url": U}, {"type": "sse", "url": U}.
        assert_eq!(url_key(&gemini, false, false), "httpUrl");
        assert_eq!(url_key(&gemini, false, true), "url");
        assert_eq!(url_key(&gemini, true, false), "url");
        assert_eq!(url_key(&gemini, true, true), "url");
        for (sse, typed) in [(false, false), (false, true), (true, false), (true, true)] {
            assert_eq!(url_key(&other, sse, typed), "url");
        }
    }

    #[test]
    fn only_our_binary_with_wrap_counts_as_wrapped() {
        let command_line = <crate::cli::Cli as clap::CommandFactory>::command();
        let binary = Binary {
            path: "/opt/bin/mcp-supervisor",
            command_line: &command_line,
        };
        assert!(binary.is_ours("/opt/bin/mcp-supervisor", &strings(&["wrap", "--", "x"])));
        assert!(binary.is_ours("mcp-supervisor", &strings(&["wrap"])));
        assert!(!binary.is_ours("mcp-supervisor", &strings(&["serve"])));
        assert!(!binary.is_ours("npx", &strings(&["wrap"])));
    }
}
