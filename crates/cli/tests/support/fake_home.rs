//! A fake home directory for the sandbox tests: a folder of the test's own with a home in it
//! holding a secret, a folder the test grants, and `serve` started with `HOME` set to that home.
//!
//! It lives under cargo's `target/tmp`, not the system temp dir: the sandbox hides that whole, so
//! a home in it would be hidden even if `$HOME` were not taken for a home.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Running, free_port, write_config};

/// The secret's content.
pub const SECRET: &str = "the secret";

pub struct FakeHome {
    /// The test's folder (its config goes here); removed on drop.
    pub dir: PathBuf,
    /// The home, `dir/home`.
    pub home: PathBuf,
    /// `home/secret.txt`.
    pub secret: PathBuf,
    /// The folder the test grants, made at `dir/<granted>`.
    pub granted: PathBuf,
}

impl FakeHome {
    /// A new one for test `tag`, its granted folder at `granted` (relative to the test's
    /// folder: `"granted"` beside the home, `"home/work"` in it).
    pub fn new(tag: &str, granted: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{tag}-{}-{nanos}", std::process::id()));
        let home = dir.join("home");
        let granted = dir.join(granted);
        for d in [&home, &granted] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let secret = home.join("secret.txt");
        std::fs::write(&secret, SECRET).expect("write the secret");
        Self {
            dir,
            home,
            secret,
            granted,
        }
    }

    /// `serve --http` of `servers` (no saved catalogs), HOME the fake home, with `envs` too.
    pub async fn serve(&self, servers: Value, envs: &[(&str, &str)]) -> Running {
        let config = self.dir.join("servers.json");
        write_config(&config, servers);
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let home = self.home.to_string_lossy().into_owned();
        let mut all = vec![("HOME", home.as_str())];
        all.extend_from_slice(envs);
        let config = config.to_string_lossy().into_owned();
        let args = [
            "serve",
            "--config",
            &config,
            "--http",
            &addr,
            "--no-catalog",
        ];
        Running::start(&args, port, &all).await
    }
}

impl Drop for FakeHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
