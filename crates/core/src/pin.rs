//! Pinned tool definitions (SPEC §13): which members of a tool definition are pinned, how a
//! server's current definitions compare with their pins, what each pin mode does with a change,
//! what is pinned or recorded as waiting for approval, and a compact, readable diff of a change.
//!
//! Pure values and functions: definitions in, verdicts and the next pin state out. It never reads
//! or writes a file, never logs, and never looks at a public name (pins belong to what the server
//! calls its tools).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a server's pins do (`"pin"`, per server or in `defaults`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinMode {
    /// Keep no pins: every definition is published as it comes.
    Off,
    /// Publish a changed tool, and log the change with a diff (the default).
    #[default]
    Warn,
    /// Withhold a changed tool (not listed, calls refused) until the change is approved.
    Block,
}

impl PinMode {
    /// Every mode, as the config writes it.
    pub const ALL: [PinMode; 3] = [PinMode::Off, PinMode::Warn, PinMode::Block];

    /// The mode as the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PinMode::Off => "off",
            PinMode::Warn => "warn",
            PinMode::Block => "block",
        }
    }

    /// The mode the config (or `--pin`) writes as `text`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == text)
    }
}

impl std::fmt::Display for PinMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The members of a tool definition that are pinned: what a model reads to decide what a tool
/// does and what it may send it. Its name is the key; `title`, `icons`, `_meta` and the like are
/// not pinned.
pub const PINNED_MEMBERS: [&str; 4] = ["description", "inputSchema", "outputSchema", "annotations"];

/// The pinned members of one definition, those it has (an absent member is absent here too).
pub type Pin = BTreeMap<String, Value>;

/// The pinned members of a tool definition (a JSON object; anything else pins nothing).
pub fn pin_of(definition: &Value) -> Pin {
    PINNED_MEMBERS
        .iter()
        .filter_map(|member| {
            definition
                .get(member)
                .map(|value| ((*member).to_owned(), value.clone()))
        })
        .collect()
}

/// One member that differs from its pin: its pinned value and its current one (`None`: absent).
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub member: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// How one current definition compares with its pin.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// It matches its pin.
    Same,
    /// No pin for this name yet: it is pinned at first sight.
    New,
    /// One or more pinned members differ (in the order of [`PINNED_MEMBERS`]).
    Changed(Vec<Change>),
}

/// Compare a current definition's pinned members with its pin. Values compare as JSON (the order
/// of an object's members does not matter, the order of an array's items does).
pub fn compare(pinned: Option<&Pin>, current: &Pin) -> Verdict {
    let Some(pinned) = pinned else {
        return Verdict::New;
    };
    let changes: Vec<Change> = PINNED_MEMBERS
        .iter()
        .filter_map(|member| {
            let (before, after) = (pinned.get(*member), current.get(*member));
            (before != after).then(|| Change {
                member: (*member).to_owned(),
                before: before.cloned(),
                after: after.cloned(),
            })
        })
        .collect();
    if changes.is_empty() {
        Verdict::Same
    } else {
        Verdict::Changed(changes)
    }
}

/// Whether a tool is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Publish,
    /// Not listed; a call is refused, naming the approval that lets it through.
    Withhold,
}

/// What `mode` does with a tool of this verdict: only `block` withholds, and only a change.
pub fn action(mode: PinMode, verdict: &Verdict) -> Action {
    match (mode, verdict) {
        (PinMode::Block, Verdict::Changed(_)) => Action::Withhold,
        _ => Action::Publish,
    }
}

/// One listed tool, judged.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    pub name: String,
    pub verdict: Verdict,
    pub action: Action,
}

/// A server's pins: the definitions accepted (first seen, or approved), and the changed ones
/// seen since, waiting for approval. Pins of tools the server no longer lists are kept: a tool
/// that comes back is compared with what it was.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PinState {
    #[serde(default)]
    pub pinned: BTreeMap<String, Pin>,
    #[serde(default)]
    pub pending: BTreeMap<String, Pin>,
}

impl PinState {
    /// Judge a server's current list (`(name, pin_of(definition))`, in its order) under `mode`,
    /// and take in what it shows: a new tool is pinned, a changed one is recorded as pending (its
    /// latest definition), one that matches its pin again is no longer pending. Returns each
    /// tool's verdict and action, and whether the state changed (and must be saved).
    ///
    /// A name listed twice is judged once, by its first definition (a server that lists one
    /// name twice gets the first published).
    pub fn observe(&mut self, mode: PinMode, current: &[(String, Pin)]) -> (Vec<Judged>, bool) {
        let mut judged: Vec<Judged> = Vec::with_capacity(current.len());
        let mut changed = false;
        for (name, pin) in current {
            if judged.iter().any(|j| &j.name == name) {
                continue;
            }
            let verdict = compare(self.pinned.get(name), pin);
            match &verdict {
                Verdict::New => {
                    self.pinned.insert(name.clone(), pin.clone());
                    self.pending.remove(name);
                    changed = true;
                }
                Verdict::Same => changed |= self.pending.remove(name).is_some(),
                Verdict::Changed(_) => {
                    if self.pending.get(name) != Some(pin) {
                        self.pending.insert(name.clone(), pin.clone());
                        changed = true;
                    }
                }
            }
            judged.push(Judged {
                name: name.clone(),
                action: action(mode, &verdict),
                verdict,
            });
        }
        (judged, changed)
    }

    /// Accept the pending changes (of one tool, or all): each becomes the pin. Returns what was
    /// accepted, each with its changes against the old pin, in name order; an error names the
    /// tool when it has no change waiting.
    pub fn approve(&mut self, tool: Option<&str>) -> Result<Vec<(String, Vec<Change>)>, String> {
        let names: Vec<String> = match tool {
            Some(name) if self.pending.contains_key(name) => vec![name.to_owned()],
            Some(name) => {
                return Err(format!(
                    "tool \"{name}\" has no change waiting for approval ({})",
                    self.waiting()
                ));
            }
            None => self.pending.keys().cloned().collect(),
        };
        let mut accepted = Vec::with_capacity(names.len());
        for name in names {
            let Some(pin) = self.pending.remove(&name) else {
                continue;
            };
            let changes = match compare(self.pinned.get(&name), &pin) {
                Verdict::Changed(changes) => changes,
                Verdict::New | Verdict::Same => Vec::new(),
            };
            self.pinned.insert(name.clone(), pin);
            accepted.push((name, changes));
        }
        Ok(accepted)
    }

    /// The changes waiting for approval, each against its pin, in name order.
    pub fn pending_changes(&self) -> Vec<(String, Vec<Change>)> {
        self.pending
            .iter()
            .filter_map(|(name, pin)| match compare(self.pinned.get(name), pin) {
                Verdict::Changed(changes) => Some((name.clone(), changes)),
                Verdict::New | Verdict::Same => None,
            })
            .collect()
    }

    /// The tools with a change waiting, in words (`waiting: a, b` or `none is waiting`).
    fn waiting(&self) -> String {
        if self.pending.is_empty() {
            "no change is waiting".to_owned()
        } else {
            let names: Vec<&str> = self.pending.keys().map(String::as_str).collect();
            format!("waiting: {}", names.join(", "))
        }
    }
}

/// The members that changed, in words: `description, inputSchema`.
pub fn changed_members(changes: &[Change]) -> String {
    let members: Vec<&str> = changes.iter().map(|c| c.member.as_str()).collect();
    members.join(", ")
}

/// How many unchanged lines are shown around each changed run of a diff.
const CONTEXT: usize = 2;

/// A compact, readable diff of a tool's changes: per member a heading (`description:`, or
/// `outputSchema (added):` / `(removed):`), then the changed lines with `- ` (pinned) and `+ `
/// (now), up to two unchanged lines around each run, and `  …` where lines are left out. A
/// string is diffed as its text, anything else as pretty-printed JSON.
pub fn render_diff(changes: &[Change]) -> String {
    let mut out = String::new();
    for change in changes {
        let note = match (&change.before, &change.after) {
            (None, Some(_)) => " (added)",
            (Some(_), None) => " (removed)",
            _ => "",
        };
        out.push_str(&format!("{}{note}:\n", change.member));
        let before = change.before.as_ref().map(as_text).unwrap_or_default();
        let after = change.after.as_ref().map(as_text).unwrap_or_default();
        let diff = similar::TextDiff::from_lines(&before, &after);
        for (i, group) in diff.grouped_ops(CONTEXT).iter().enumerate() {
            if i > 0 {
                out.push_str("  …\n");
            }
            for op in group {
                for line in diff.iter_changes(op) {
                    let sign = match line.tag() {
                        similar::ChangeTag::Delete => "- ",
                        similar::ChangeTag::Insert => "+ ",
                        similar::ChangeTag::Equal => "  ",
                    };
                    out.push_str(sign);
                    out.push_str(line.value().trim_end_matches('\n'));
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// A member's value as the lines a diff compares: a string as its text, anything else as
/// pretty-printed JSON (its object members sorted, so that only real changes show).
fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}
