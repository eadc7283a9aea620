//! HAProxy (Debian's package) in front of replicas of `serve --http`, for the tests of SPEC §12
//! and §14: round robin per request, no stickiness, readiness checks.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::path_str;
use mcp_supervisor_testkit::free_port;

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(30);

fn haproxy() -> PathBuf {
    for candidate in [
        "/usr/sbin/haproxy",
        "/usr/bin/haproxy",
        "/usr/local/sbin/haproxy",
    ] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!(
        "haproxy is missing: run scripts/install-test-deps.sh (as root it installs Debian's package), or apt-get install haproxy"
    );
}

/// HAProxy in the foreground: round robin per request over `ports`, no stickiness, readiness
/// checks (`/readyz`) every 100 ms, a refused connection retried on another replica.
pub struct Balancer {
    pub child: tokio::process::Child,
    pub port: u16,
}

pub async fn start_haproxy(dir: &Path, ports: &[u16]) -> Balancer {
    let port = free_port();
    let mut config = format!(
        "global\n    maxconn 1024\n\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 60s\n    timeout server 60s\n    retries 3\n    option redispatch 1\n    retry-on conn-failure\n\nfrontend mcp\n    bind 127.0.0.1:{port}\n    default_backend replicas\n\nbackend replicas\n    balance roundrobin\n    option httpchk GET /readyz\n    http-check expect status 200\n"
    );
    for (n, p) in ports.iter().enumerate() {
        config.push_str(&format!(
            "    server r{n} 127.0.0.1:{p} check inter 100 fall 1 rise 2\n"
        ));
    }
    let file = dir.join("haproxy.cfg");
    std::fs::write(&file, config).expect("write haproxy.cfg");
    let check = std::process::Command::new(haproxy())
        .args(["-c", "-q", "-f", &path_str(&file)])
        .status();
    assert!(
        matches!(check, Ok(s) if s.success()),
        "haproxy refused its config: {check:?}"
    );
    let child = tokio::process::Command::new(haproxy())
        .args(["-db", "-f", &path_str(&file)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn haproxy");
    let deadline = Instant::now() + LIMIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "haproxy did not listen on {port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Balancer { child, port }
}
