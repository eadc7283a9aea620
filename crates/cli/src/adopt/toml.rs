//! Codex's `config.toml`: each `[mcp_servers.NAME]` table, edited in place through `toml_edit` so
//! comments, blank lines and key order stay. It must never touch a table outside `mcp_servers`.

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value};

use super::entry::{EntryMap, Keys, NewValue};
use super::{Line, Op, Plan};

const KEYS: Keys = Keys {
    command: "command",
    headers: "http_headers",
    env_headers: &["bearer_token_env_var", "env_http_headers"],
    http_url: "url",
    url_is_sse: false,
};

/// Adopt (or undo) every wanted server of a Codex config.
pub fn plan(text: &str, op: &Op) -> Result<Plan, String> {
    let mut doc: DocumentMut = text.parse().map_err(|error: toml_edit::TomlError| {
        let at = error.span().map_or(0, |span| span.start);
        let line = text[..at].matches('\n').count() + 1;
        let column = text[..at]
            .rsplit('\n')
            .next()
            .map_or(0, |l| l.chars().count())
            + 1;
        format!(
            "it is not valid TOML: {} at line {line}, column {column}",
            error.message().trim_end()
        )
    })?;
    let mut lines = Vec::new();
    if let Some(servers) = doc.get_mut("mcp_servers").and_then(Item::as_table_mut) {
        let names: Vec<String> = servers.iter().map(|(name, _)| name.to_owned()).collect();
        for name in names {
            if !op.wants(&name) {
                continue;
            }
            let label = format!("mcp_servers.{name}");
            let Some(Item::Table(table)) = servers.get_mut(&name) else {
                let reason = "it is not a [mcp_servers.NAME] table (an inline table is not \
                              supported); write it as one"
                    .to_owned();
                lines.push(Line::skipped(label, name, reason));
                continue;
            };
            let outcome = op.apply(&mut TomlEntry { table }, &KEYS);
            lines.push(Line {
                label,
                name,
                outcome,
                note: None,
            });
        }
    }
    let text = doc.to_string();
    // Never hand on a text that would not parse: that would be a bug here, not the user's.
    if let Err(error) = text.parse::<DocumentMut>() {
        return Err(format!(
            "adopt made invalid TOML of it ({}), a bug: please report it with the file",
            error.message().trim_end()
        ));
    }
    Ok(Plan { text, lines })
}

/// One `[mcp_servers.NAME]` table.
struct TomlEntry<'a> {
    table: &'a mut Table,
}

fn to_value(value: NewValue) -> Value {
    match value {
        NewValue::Str(text) => Value::from(text),
        NewValue::List(items) => Value::Array(items.into_iter().collect::<Array>()),
        NewValue::Map(pairs) => Value::InlineTable(pairs.into_iter().collect::<InlineTable>()),
    }
}

impl EntryMap for TomlEntry<'_> {
    fn get_str(&self, key: &str) -> Result<Option<String>, String> {
        match self.table.get(key) {
            None => Ok(None),
            Some(item) => item
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or_else(|| format!("its `{key}` is {}, not a string", item.type_name())),
        }
    }

    fn get_list(&self, key: &str) -> Result<Option<Vec<String>>, String> {
        let Some(item) = self.table.get(key) else {
            return Ok(None);
        };
        let Some(array) = item.as_array() else {
            return Err(format!("its `{key}` is {}, not an array", item.type_name()));
        };
        array
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("its `{key}` holds {}, not only strings", v.type_name()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn get_map(&self, key: &str) -> Result<Option<Vec<(String, String)>>, String> {
        let Some(item) = self.table.get(key) else {
            return Ok(None);
        };
        let Some(table) = item.as_table_like() else {
            return Err(format!("its `{key}` is {}, not a table", item.type_name()));
        };
        table
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.to_owned(), s.to_owned()))
                    .ok_or_else(|| format!("its `{key}.{k}` is {}, not a string", v.type_name()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn contains(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    fn set(&mut self, key: &str, value: NewValue) {
        // A `[mcp_servers.NAME.env]` table stays a table: its keys that stay keep their lines.
        if let (Some(Item::Table(table)), NewValue::Map(pairs)) = (self.table.get_mut(key), &value)
        {
            table.retain(|name, _| pairs.iter().any(|(k, _)| k == name));
            for (name, text) in pairs {
                if table.get(name).and_then(Item::as_str) != Some(text.as_str()) {
                    TomlEntry { table }.set(name, NewValue::Str(text.clone()));
                }
            }
            return;
        }
        let mut new = to_value(value);
        match self.table.get_mut(key) {
            Some(Item::Value(old)) => {
                // Keep the spacing and any trailing comment around the old value.
                *new.decor_mut() = old.decor().clone();
                *old = new;
            }
            _ => {
                self.table.insert(key, Item::Value(new));
            }
        }
    }

    fn replace(&mut self, remove: &[&str], insert: Vec<(String, NewValue)>) {
        let mut order: Vec<String> = Vec::new();
        let mut placed = false;
        for (key, _) in self.table.iter() {
            if remove.contains(&key) {
                if !placed {
                    order.extend(insert.iter().map(|(k, _)| k.clone()));
                    placed = true;
                }
            } else {
                order.push(key.to_owned());
            }
        }
        for key in remove {
            self.table.remove(key);
        }
        for (key, value) in insert {
            self.table.insert(&key, Item::Value(to_value(value)));
        }
        let rank = |key: &str| order.iter().position(|k| k == key).unwrap_or(usize::MAX);
        self.table
            .sort_values_by(|a, _, b, _| rank(a.get()).cmp(&rank(b.get())));
    }
}
