//! Public names (SPEC §4, §9): one policy for every kind of name a proxy publishes for many servers
//! (tools, prompts): upstream names to public names, stable byte for byte across runs and
//! releases, with hash-shortening and collision breaking, and a warning per name that could not
//! have its natural one. It never consults anything but its arguments (no std `DefaultHasher`, no
//! map iteration order).

use std::collections::HashMap;

/// The longest public name.
pub const MAX_NAME_LEN: usize = 64;

/// The separator used when none is configured.
pub const DEFAULT_SEPARATOR: &str = "__";

/// What a public name names: the word its warnings use. The rule is the same for every kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Tool,
    Prompt,
}

impl NameKind {
    /// The noun warnings use.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Prompt => "prompt",
        }
    }
}

/// How tools and prompts are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NamingMode {
    /// `<server><sep><name>` for every tool and prompt.
    #[default]
    Prefixed,
    /// The upstream name as it is; where an earlier server holds it, the prefixed name.
    Original,
}

/// The `naming` block of a config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamingConfig {
    pub mode: NamingMode,
    pub separator: String,
}

impl Default for NamingConfig {
    fn default() -> Self {
        Self {
            mode: NamingMode::Prefixed,
            separator: DEFAULT_SEPARATOR.to_owned(),
        }
    }
}

/// Whether `c` may appear in a public name (and in a separator): `A-Za-z0-9_.-`.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// `<server><sep><tool>` with every character outside `A-Za-z0-9_.-` replaced by `_`, at most 64
/// characters. A longer one keeps its first 55 characters and ends in `_` plus 8 hex digits of
/// [`pair_hash`] of the full, unsanitized `(server, tool)` pair.
pub fn prefixed_name(server: &str, tool: &str, sep: &str) -> String {
    let full = sanitized(&[server, sep, tool]);
    if full.len() <= MAX_NAME_LEN {
        full
    } else {
        with_hash_suffix(&full, pair_hash(server, tool, 0))
    }
}

/// Assigns public names to every server's tools, or every server's prompts (`kind`), in config
/// order. Tools and prompts are named apart (a prompt may share a tool's public name), each by
/// this one rule.
///
/// `servers` holds each server's name and its upstream names in upstream order. The result holds,
/// for each server and each of its names, the public name, plus one warning per name that could
/// not have its natural public name. All public names are unique, and the same input always gives
/// the same output.
///
/// - Prefixed mode: [`prefixed_name`].
/// - Original mode: the upstream name unchanged (not sanitized: the client sees what the server
///   would show) unless an earlier tool holds it; then the prefixed name, with a warning.
/// - Any collision left (two names that sanitize alike, a tool listed twice) is broken with a hash
///   suffix of the pair and a counter, with a warning.
pub fn assign(
    kind: NameKind,
    config: &NamingConfig,
    servers: &[(&str, Vec<&str>)],
) -> (Vec<Vec<String>>, Vec<String>) {
    // Sized once: grown step by step, its tables were most of a rebuild's allocations.
    let mut owners: HashMap<String, (&str, &str)> =
        HashMap::with_capacity(servers.iter().map(|(_, tools)| tools.len()).sum());
    let mut warnings = Vec::new();
    let mut names = Vec::with_capacity(servers.len());
    for (server, tools) in servers {
        let mut server_names = Vec::with_capacity(tools.len());
        for tool in tools {
            let natural = match config.mode {
                NamingMode::Prefixed => prefixed_name(server, tool, &config.separator),
                NamingMode::Original => (*tool).to_owned(),
            };
            let name = match owners.get(&natural) {
                None => natural,
                Some(&(owner_server, owner_tool)) => {
                    let name = fallback_name(config, server, tool, &owners);
                    warnings.push(collision_warning(
                        kind,
                        (server, tool),
                        (owner_server, owner_tool),
                        &natural,
                        &name,
                    ));
                    name
                }
            };
            owners.insert(name.clone(), (server, tool));
            server_names.push(name);
        }
        names.push(server_names);
    }
    (names, warnings)
}

/// The name of a tool whose natural name is taken: in original mode the prefixed name if free,
/// otherwise the prefixed name with a salted hash suffix (salt 1, 2, … until free).
fn fallback_name(
    config: &NamingConfig,
    server: &str,
    tool: &str,
    owners: &HashMap<String, (&str, &str)>,
) -> String {
    let prefixed = prefixed_name(server, tool, &config.separator);
    if config.mode == NamingMode::Original && !owners.contains_key(&prefixed) {
        return prefixed;
    }
    let full = sanitized(&[server, &config.separator, tool]);
    let mut salt: u32 = 1;
    loop {
        let candidate = with_hash_suffix(&full, pair_hash(server, tool, salt));
        if !owners.contains_key(&candidate) || salt == u32::MAX {
            return candidate;
        }
        salt += 1;
    }
}

fn collision_warning(
    kind: NameKind,
    (server, tool): (&str, &str),
    (owner_server, owner_tool): (&str, &str),
    natural: &str,
    published: &str,
) -> String {
    let noun = kind.noun();
    if owner_tool == tool && owner_server == server {
        format!(
            "server {server:?} lists {noun} {tool:?} more than once; the repeat is published as {published:?}"
        )
    } else if owner_tool == tool {
        format!(
            "{noun} {tool:?} of server {server:?} is also offered by server {owner_server:?}; it is published as {published:?}"
        )
    } else {
        format!(
            "{noun} {tool:?} of server {server:?} would be published as {natural:?}, which {noun} {owner_tool:?} of server {owner_server:?} already holds; it is published as {published:?}"
        )
    }
}

/// `parts` one after the other, every character outside `A-Za-z0-9_.-` replaced by `_`, in one
/// allocation: the registry names every tool of every server again each time a server's list
/// changes, so at startup this runs n² times over.
fn sanitized(parts: &[&str]) -> String {
    // A replaced character is one byte, never more than the one it replaces.
    let mut name = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        name.extend(part.chars().map(|c| if is_name_char(c) { c } else { '_' }));
    }
    name
}

/// `name` cut to leave room for `_` and 8 hex digits of `hash`, then those. `name` is ASCII.
fn with_hash_suffix(name: &str, hash: u32) -> String {
    const SUFFIX_LEN: usize = 9;
    let keep = name.len().min(MAX_NAME_LEN - SUFFIX_LEN);
    let head = name.get(..keep).unwrap_or(name);
    format!("{head}_{hash:08x}")
}

// === Stable hash ===

/// A stable 32-bit hash of a `(server, tool)` pair and a salt: FNV-1a 64 over the server's length
/// (8 bytes, little-endian), the server's bytes, the tool's bytes and, when `salt` is not 0, the
/// salt (4 bytes, little-endian); the 64-bit result folded by XOR of its halves. Fixed by this
/// definition, so public names never change with a Rust release.
pub fn pair_hash(server: &str, tool: &str, salt: u32) -> u32 {
    let mut h = Fnv1a64::new();
    h.write(&(server.len() as u64).to_le_bytes());
    h.write(server.as_bytes());
    h.write(tool.as_bytes());
    if salt != 0 {
        h.write(&salt.to_le_bytes());
    }
    let full = h.finish();
    // Truncation to the low half is the fold's intent.
    ((full >> 32) ^ (full & 0xffff_ffff)) as u32
}

/// FNV-1a, 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
struct Fnv1a64(u64);

impl Fnv1a64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Self(Self::OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sanitized_name_is_written_into_one_allocation_of_its_parts_length() {
        let name = sanitized(&["日本", "__", "a b.c-d"]);
        assert_eq!(name, "____a_b.c-d");
        // Never grown: the capacity is what it was made with (6 + 2 + 7 bytes).
        assert_eq!(name.capacity(), 15);
    }

    #[test]
    fn fnv1a64_matches_the_published_test_vectors() {
        let hash = |s: &str| {
            let mut h = Fnv1a64::new();
            h.write(s.as_bytes());
            h.finish()
        };
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
    }
}
