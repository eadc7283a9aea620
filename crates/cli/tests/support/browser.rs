//! A real browser for the dashboard's tests (issue 32): Debian's headless Chromium driven over
//! WebDriver (`chromedriver`, through `fantoccini`). [`Browser::start`] starts chromedriver on a
//! free loopback port in a process group of its own and a Chromium with a fresh profile; every
//! wait is bounded and polls every 50 ms; screenshots go to `target/test-screenshots/`. Dropping a
//! [`Browser`] ends chromedriver and the Chromium it started (the whole group, by its pid) and
//! removes the profile. The programs are Debian's `/usr/bin/chromium` and `/usr/bin/chromedriver`
//! (else found on the PATH; `MCP_SUPERVISOR_CHROMIUM` and `MCP_SUPERVISOR_CHROMEDRIVER` name
//! others). Where either is absent the start panics saying how to install them, unless
//! `MCP_SUPERVISOR_SKIP_BROWSER=1`: then it writes a loud `SKIPPED` line straight to stderr (not
//! captured by the test harness) and returns `None`.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// How often a wait looks again.
pub const POLL: Duration = Duration::from_millis(50);
/// The desktop window.
pub const WIDE: (u32, u32) = (1280, 900);
/// A phone's window (the page must not scroll sideways there).
pub const NARROW: (u32, u32) = (390, 844);

const CHROMIUM: (&str, &str) = ("chromium", "MCP_SUPERVISOR_CHROMIUM");
const CHROMEDRIVER: (&str, &str) = ("chromedriver", "MCP_SUPERVISOR_CHROMEDRIVER");
/// The environment variable that turns a missing browser into a visible skip.
pub const SKIP_VAR: &str = "MCP_SUPERVISOR_SKIP_BROWSER";

/// `name` from the environment variable `var` when set (a path), else in /usr/bin or on the PATH.
fn find_program(name: &str, var: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let mut dirs = vec![PathBuf::from("/usr/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// A line on the real stderr, which the test harness does not capture: a skip must be seen.
pub fn shout(line: &str) {
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "\n{line}\n");
    let _ = stderr.flush();
}

/// chromedriver and everything it started; killed as a group (its pid is the group's id).
struct Driver {
    child: Child,
    profile: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Chromium's own processes may outlive chromedriver by a moment: the group goes for good.
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// A headless Chromium under WebDriver.
pub struct Browser {
    client: Option<Client>,
    // Dropped after the client: the session is ended first where it can be.
    _driver: Driver,
    /// Which test this is, in the screenshots' names.
    tag: String,
}

impl Browser {
    /// A fresh Chromium with a `size` window, or `None` (after a loud SKIPPED line) where the
    /// browser is absent and `MCP_SUPERVISOR_SKIP_BROWSER=1`. Panics where it is absent otherwise.
    pub async fn start(tag: &str, size: (u32, u32)) -> Option<Self> {
        let (Some(chromium), Some(chromedriver)) = (
            find_program(CHROMIUM.0, CHROMIUM.1),
            find_program(CHROMEDRIVER.0, CHROMEDRIVER.1),
        ) else {
            let what = "Debian's chromium and chromium-driver are not installed \
                        (scripts/install-test-deps.sh installs them, as root)";
            if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
                shout(&format!(
                    "!!!!! SKIPPED {tag}: {what}; {SKIP_VAR}=1 is set, so this real-browser test \
                     ran NOTHING !!!!!"
                ));
                return None;
            }
            panic!("{what}; set {SKIP_VAR}=1 to skip the real-browser tests, visibly");
        };
        let port = mcp_supervisor_testkit::free_port();
        let profile = mcp_supervisor_testkit::temp_dir(&format!("chromium-{tag}"));
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", chromedriver.display()));
        let driver = Driver { child, profile };
        wait_listening(port, Duration::from_secs(15)).await;
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--hide-scrollbars",
                    "--disable-crash-reporter", "--disable-breakpad",
                    format!("--user-data-dir={}", driver.profile.display()),
                    format!("--window-size={},{}", size.0, size.1),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("a WebDriver session with {}: {e}", chromium.display()));
        let browser = Self {
            client: Some(client),
            _driver: driver,
            tag: tag.to_string(),
        };
        browser.resize(size).await;
        Some(browser)
    }

    /// [`Browser::start`], then open `url`.
    pub async fn start_at(tag: &str, size: (u32, u32), url: &str) -> Option<Self> {
        let browser = Self::start(tag, size).await?;
        browser.open(url).await;
        Some(browser)
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("the session is open")
    }

    /// Sets the viewport (the inner window) to `size`: the outer window is grown by the
    /// difference the browser chrome takes.
    pub async fn resize(&self, size: (u32, u32)) {
        self.client()
            .set_window_size(size.0, size.1)
            .await
            .expect("set the window size");
        let inner = self
            .js("return [window.innerWidth, window.innerHeight];", vec![])
            .await;
        let (w, h) = (
            inner[0].as_u64().unwrap_or(0) as u32,
            inner[1].as_u64().unwrap_or(0) as u32,
        );
        if (w, h) != size && w > 0 && h > 0 {
            let outer = (
                size.0 + size.0.saturating_sub(w),
                size.1 + size.1.saturating_sub(h),
            );
            self.client()
                .set_window_size(outer.0, outer.1)
                .await
                .expect("set the window size");
        }
    }

    /// Opens `url` (returns once the document has loaded).
    pub async fn open(&self, url: &str) {
        self.client()
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) and returns its value.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client()
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed ({e}): {script}"))
    }

    /// Polls `script` every 50 ms until it returns something other than `null`, `false`, `0`
    /// or `""`, and returns that; panics after `limit` saying `what` and the last value.
    pub async fn wait_js(
        &self,
        what: &str,
        limit: Duration,
        script: &str,
        args: Vec<Value>,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        let mut last = Value::Null;
        loop {
            // A script may fail while the page is being replaced: that is a "not yet".
            if let Ok(value) = self.client().execute(script, args.clone()).await {
                let done = match &value {
                    Value::Null => false,
                    Value::Bool(b) => *b,
                    Value::Number(n) => n.as_f64() != Some(0.0),
                    Value::String(s) => !s.is_empty(),
                    _ => true,
                };
                if done {
                    return value;
                }
                last = value;
            }
            if tokio::time::Instant::now() >= deadline {
                let shot = self.screenshot("timeout").await;
                panic!(
                    "{what}: not within {limit:?}; last: {last}; screenshot {}",
                    shot.display()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits (bounded) until an element matches `css`.
    pub async fn wait_for(&self, css: &str, limit: Duration) {
        self.wait_js(
            &format!("an element {css}"),
            limit,
            "return document.querySelector(arguments[0]) !== null;",
            vec![json!(css)],
        )
        .await;
    }

    /// Waits (bounded) until the first element matching `css` has a text that contains `text`;
    /// returns that text.
    pub async fn wait_text(&self, css: &str, text: &str, limit: Duration) -> String {
        let found = self
            .wait_js(
                &format!("{css} with the text {text:?}"),
                limit,
                "const e = document.querySelector(arguments[0]);
                 return e && e.textContent.includes(arguments[1]) ? e.textContent : null;",
                vec![json!(css), json!(text)],
            )
            .await;
        found.as_str().unwrap_or_default().trim().to_string()
    }

    /// The text (its `textContent`, trimmed: CSS cannot change it) of the first element that
    /// matches `css`, or `None` when there is none.
    pub async fn text(&self, css: &str) -> Option<String> {
        let value = self
            .js(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                vec![json!(css)],
            )
            .await;
        value.as_str().map(|s| s.trim().to_string())
    }

    /// The attribute `name` of the first element that matches `css`.
    pub async fn attr(&self, css: &str, name: &str) -> Option<String> {
        let value = self
            .js(
                "const e = document.querySelector(arguments[0]);
                 return e ? e.getAttribute(arguments[1]) : null;",
                vec![json!(css), json!(name)],
            )
            .await;
        value.as_str().map(str::to_string)
    }

    /// The first element that matches `css` (it must be there).
    async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
    }

    /// Types `text` into the element that matches `css` (as a person would: key events).
    pub async fn type_into(&self, css: &str, text: &str) {
        let result = self.find(css).await.send_keys(text).await;
        result.unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Clicks the element that matches `css`.
    pub async fn click(&self, css: &str) {
        let result = self.find(css).await.click().await;
        result.unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// A PNG of the viewport, kept as `target/test-screenshots/<tag>-<name>.png`; its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("create target/test-screenshots");
        let path = dir.join(format!("{}-{name}.png", self.tag));
        let png = self.client().screenshot().await.expect("a screenshot");
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }

    /// Ends the WebDriver session (Chromium quits); the drop then ends chromedriver.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
        }
    }
}

/// `target/test-screenshots/` of the workspace.
pub fn screenshot_dir() -> PathBuf {
    mcp_supervisor_testkit::workspace_root().join("target/test-screenshots")
}

async fn wait_listening(port: u16, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("chromedriver did not listen on {port} within {limit:?}");
}

/// The width and height of a PNG file (from its IHDR chunk).
pub fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).expect("read the PNG");
    assert!(
        bytes.len() > 24 && &bytes[1..4] == b"PNG",
        "{} is a PNG",
        path.display()
    );
    let be =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (be(16), be(20))
}
