//! One server entry, format-neutral: decides whether it is a stdio server, a URL server or one
//! already wrapped, and rewrites it through the [`EntryMap`] of its format. It never reads or
//! writes files, and never drops a key it does not name.
//!
//! Undo needs no backup and no marker key: a wrapped entry's `args` are exactly
//! `wrap -- CMD ARGS...` or `wrap --url|--sse URL [--header-from-env NAME=VAR]...`, so the
//! original command, arguments, URL and transport are read back from them, and each header's value from the entry's
//! `env` (where adopt moved it, so that a token never shows on a command line). Every other key
//! (cwd, unknown ones, the rest of env) is never touched by adopt, so it needs no restoring.

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
    /// The key of a streamable-HTTP server's URL: `url`, or Gemini CLI's `httpUrl`.
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

/// Rewrite one entry to run through `wrap`. A wrapped entry is left alone.
pub fn adopt(map: &mut dyn EntryMap, keys: &Keys, binary: &Binary) -> Outcome {
    match kind(map, keys, binary) {
        Err(reason) => Outcome::Skipped(reason),
        Ok(Kind::Wrapped(_)) => Outcome::Unchanged("already goes through mcp-supervisor"),
        Ok(Kind::Plain(Server::Stdio { command, args })) => {
            let mut wrapped = vec!["wrap".to_owned(), "--".to_owned(), command];
            wrapped.extend(args);
            map.set(keys.command, NewValue::Str(binary.path.to_owned()));
            map.set("args", NewValue::List(wrapped));
            Outcome::Changed("wrapped")
        }
        Ok(Kind::Plain(Server::Url { url, headers, sse })) => {
            let flag = if sse { "--sse" } else { "--url" };
            let mut wrapped = vec!["wrap".to_owned(), flag.to_owned(), url];
            let mut env = match map.get_map("env") {
                Ok(env) => env.unwrap_or_default(),
                Err(reason) => return Outcome::Skipped(reason),
            };
            let moved = !headers.is_empty();
            for header in headers {
                let (name, var) = match header {
                    Header::Value(name, value) => {
                        let var = header_var(&name, &env);
                        env.push((var.clone(), value));
                        (name, var)
                    }
                    Header::FromEnv(name, var) => (name, var),
                };
                wrapped.push("--header-from-env".to_owned());
                wrapped.push(format!("{name}={var}"));
            }
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
            if moved {
                map.set("env", NewValue::Map(env));
            }
            if map.contains("type") {
                map.set("type", NewValue::Str("stdio".to_owned()));
            }
            Outcome::Changed("wrapped")
        }
    }
}

/// Restore one wrapped entry from its `wrap` arguments. An entry that is not wrapped is left alone.
pub fn undo(map: &mut dyn EntryMap, keys: &Keys, binary: &Binary) -> Outcome {
    let args = match kind(map, keys, binary) {
        Ok(Kind::Wrapped(args)) => args,
        Ok(_) | Err(_) => return Outcome::Unchanged("does not go through mcp-supervisor"),
    };
    match unwrap_args(&args) {
        Err(reason) => Outcome::Skipped(reason),
        Ok(Server::Stdio { command, args }) => {
            map.set(keys.command, NewValue::Str(command));
            if args.is_empty() {
                map.replace(&["args"], Vec::new());
            } else {
                map.set("args", NewValue::List(args));
            }
            Outcome::Changed("restored")
        }
        Ok(Server::Url { url, headers, sse }) => {
            let mut env = match map.get_map("env") {
                Ok(env) => env.unwrap_or_default(),
                Err(reason) => return Outcome::Skipped(reason),
            };
            let mut values = Vec::new();
            let moved = headers.iter().any(|h| matches!(h, Header::FromEnv(..)));
            for header in headers {
                match header {
                    Header::Value(name, value) => values.push((name, value)),
                    Header::FromEnv(name, var) => {
                        let Some(at) = env.iter().position(|(k, _)| *k == var) else {
                            return Outcome::Skipped(format!(
                                "its header {name} comes from env.{var}, which it does not have; \
                                 restore it by hand"
                            ));
                        };
                        values.push((name, env.remove(at).1));
                    }
                }
            }
            let (url_key, kind) = if sse {
                ("url", "sse")
            } else {
                (keys.http_url, "http")
            };
            let mut insert = vec![(url_key.to_owned(), NewValue::Str(url))];
            if !values.is_empty() {
                insert.push((keys.headers.to_owned(), NewValue::Map(values)));
            }
            map.replace(&[keys.command, "args"], insert);
            if moved && env.is_empty() {
                map.replace(&["env"], Vec::new());
            } else if moved {
                map.set("env", NewValue::Map(env));
            }
            if map.contains("type") {
                map.set("type", NewValue::Str(kind.to_owned()));
            }
            Outcome::Changed("restored")
        }
    }
}

/// `wrap` flags that take a value; any of them other than the URL and the headers (added by hand)
/// is dropped on undo, since the original entry had no such thing.
const VALUE_FLAGS: &[&str] = &[
    "--name",
    "--initial-delay-ms",
    "--max-delay-ms",
    "--max-attempts",
    "--tool-call-timeout-ms",
    "--connect-timeout-ms",
    "--health-interval-ms",
    "--retry-tool",
    "--http",
    "--admin",
    "--auth-token-env",
    "--allow-host",
    "--allow-origin",
];
const BOOL_FLAGS: &[&str] = &["--no-reconnect", "--stdio"];

fn unwrap_args(args: &[String]) -> Result<Server, String> {
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
        if BOOL_FLAGS.contains(&flag) {
            continue;
        }
        if !["--url", "--sse", "--header", "--header-from-env"].contains(&flag)
            && !VALUE_FLAGS.contains(&flag)
        {
            return Err(format!(
                "its wrap arguments hold `{arg}`, which adopt does not know; restore it by hand"
            ));
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

    #[test]
    fn wrap_arguments_give_back_the_command_or_url_and_headers() {
        assert_eq!(
            unwrap_args(&strings(&["wrap", "--", "npx", "-y", "pkg", "--", "x"])),
            Ok(Server::Stdio {
                command: "npx".into(),
                args: strings(&["-y", "pkg", "--", "x"]),
            })
        );
        assert_eq!(
            unwrap_args(&strings(&[
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
            unwrap_args(&strings(&["wrap", "--sse", "http://h/sse"])),
            Ok(Server::Url {
                url: "http://h/sse".into(),
                headers: Vec::new(),
                sse: true,
            })
        );
        assert!(unwrap_args(&strings(&["wrap", "--weird", "--", "x"])).is_err());
        assert!(unwrap_args(&strings(&["wrap", "--"])).is_err());
    }

    #[test]
    fn only_our_binary_with_wrap_counts_as_wrapped() {
        let binary = Binary {
            path: "/opt/bin/mcp-supervisor",
        };
        assert!(binary.is_ours("/opt/bin/mcp-supervisor", &strings(&["wrap", "--", "x"])));
        assert!(binary.is_ours("mcp-supervisor", &strings(&["wrap"])));
        assert!(!binary.is_ours("mcp-supervisor", &strings(&["serve"])));
        assert!(!binary.is_ours("npx", &strings(&["wrap"])));
    }
}
