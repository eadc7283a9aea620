//! The `sandbox` key (SPEC §16) through `parse_config` and the typed builder: what it becomes
//! (paths expanded, `~/` from HOME, the default network), how `defaults` applies, and every
//! problem with its path. The lookup is a fixed table.

use std::path::PathBuf;

use mcp_supervisor_core::config::{
    Config, ConfigErrors, Network, SandboxConfig, TransportConfig, parse_config,
};

fn env(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/me".to_owned()),
        "DATA" => Some("/srv/data".to_owned()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    parse_config(text, &env)
}

fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(config) => panic!("expected problems, got {config:?}"),
        Err(e) => e.problems.iter().map(ToString::to_string).collect(),
    }
}

fn sandbox_of(text: &str, server: &str) -> Option<SandboxConfig> {
    match parse(text) {
        Ok(config) => config.server(server).and_then(|s| s.sandbox.clone()),
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

#[test]
fn a_sandbox_has_absolute_paths_home_expanded_and_no_network_by_default() {
    let text = r#"{ "mcpServers": { "fs": { "command": "srv",
        "sandbox": { "read": ["/etc/app", "~/docs"], "write": ["${DATA}/out"] } } } }"#;
    assert_eq!(
        sandbox_of(text, "fs"),
        Some(SandboxConfig {
            read: vec![PathBuf::from("/etc/app"), PathBuf::from("/home/me/docs")],
            write: vec![PathBuf::from("/srv/data/out")],
            network: Network::None,
            best_effort: false,
        })
    );
}

#[test]
fn network_is_none_all_or_connect_ports() {
    for (json, network) in [
        (r#""none""#, Network::None),
        (r#""all""#, Network::All),
        (
            r#"{ "connectPorts": [443, 8080] }"#,
            Network::ConnectPorts(vec![443, 8080]),
        ),
        (r#"{ "connectPorts": [] }"#, Network::ConnectPorts(vec![])),
    ] {
        let text = format!(
            r#"{{ "mcpServers": {{ "s": {{ "command": "x", "sandbox": {{ "network": {json}, "bestEffort": true }} }} }} }}"#
        );
        let sandbox = sandbox_of(&text, "s").expect("a sandbox");
        assert_eq!(sandbox.network, network, "{json}");
        assert!(sandbox.best_effort);
    }
}

#[test]
fn a_servers_own_sandbox_replaces_the_defaults_whole_and_url_servers_take_none() {
    let text = r#"{
      "defaults": { "sandbox": { "read": ["/a"], "network": "all" } },
      "mcpServers": {
        "plain": { "command": "x" },
        "own": { "command": "x", "sandbox": { "write": ["/b"] } },
        "web": { "url": "http://127.0.0.1:1/mcp" }
      } }"#;
    let plain = sandbox_of(text, "plain").expect("the default's");
    assert_eq!(plain.read, [PathBuf::from("/a")]);
    assert_eq!(plain.network, Network::All);
    let own = sandbox_of(text, "own").expect("its own");
    assert!(own.read.is_empty(), "nothing of the default's is merged");
    assert_eq!(own.write, [PathBuf::from("/b")]);
    assert_eq!(own.network, Network::None);
    assert_eq!(sandbox_of(text, "web"), None);
}

#[test]
fn every_problem_names_its_key_and_what_to_do() {
    let found = problems(
        r#"{ "mcpServers": {
          "fs": { "command": "x", "sandbox": { "read": ["rel/dir", 5, "~bob/x"], "write": "/tmp",
                  "network": { "connectPorts": [0, 70000, "80"] }, "bestEffort": "yes", "other": 1 } },
          "web": { "url": "http://127.0.0.1:1/mcp", "sandbox": {} },
          "net": { "command": "x", "sandbox": { "network": "some" } }
        } }"#,
    );
    let expect = |path: &str, words: &str| {
        assert!(
            found
                .iter()
                .any(|p| p.starts_with(&format!("{path} ")) && p.contains(words)),
            "no problem at {path} saying {words:?} in {found:#?}"
        );
    };
    expect(
        "mcpServers.fs.sandbox.read[0]",
        "must be an absolute path or start with ~/",
    );
    expect("mcpServers.fs.sandbox.read[1]", "must be a string");
    expect("mcpServers.fs.sandbox.read[2]", "~user are not expanded");
    expect("mcpServers.fs.sandbox.write", "must be an array of paths");
    expect(
        "mcpServers.fs.sandbox.network.connectPorts[0]",
        "1 to 65535 (got 0)",
    );
    expect(
        "mcpServers.fs.sandbox.network.connectPorts[1]",
        "(got 70000)",
    );
    expect(
        "mcpServers.fs.sandbox.network.connectPorts[2]",
        "(got a string)",
    );
    expect("mcpServers.fs.sandbox.bestEffort", "true or false");
    expect("mcpServers.fs.sandbox.other", "is not a known key");
    expect(
        "mcpServers.web.sandbox",
        "applies only to \"command\" servers",
    );
    expect("mcpServers.net.sandbox.network", "must be \"none\"");
    assert!(
        !found.iter().any(|p| p.contains("rel/dir")),
        "a path is never quoted: {found:#?}"
    );
}

#[test]
fn a_home_path_without_home_is_refused() {
    let errors = parse_config(
        r#"{ "mcpServers": { "s": { "command": "x", "sandbox": { "read": ["~/x"] } } } }"#,
        &|_| None,
    )
    .expect_err("no HOME");
    assert_eq!(
        errors.problems[0].path, "mcpServers.s.sandbox.read[0]",
        "{errors}"
    );
    assert!(errors.problems[0].message.contains("HOME is not set"));
}

#[test]
fn a_bad_default_sandbox_is_reported_once() {
    let found = problems(
        r#"{ "defaults": { "sandbox": { "read": ["x"] } },
             "mcpServers": { "a": { "command": "x" }, "b": { "command": "y" } } }"#,
    );
    assert_eq!(
        found,
        [
            "defaults.sandbox.read[0] must be an absolute path or start with ~/ (a relative path would depend on where the proxy runs): give the full path"
        ]
    );
}

#[test]
fn the_builder_checks_a_typed_sandbox_at_the_config_files_paths() {
    let stdio = TransportConfig::Stdio {
        command: "x".into(),
        args: vec![],
        env: vec![],
        cwd: None,
    };
    let good = SandboxConfig {
        read: vec![PathBuf::from("/srv")],
        write: vec![],
        network: Network::ConnectPorts(vec![443]),
        best_effort: false,
    };
    let config = Config::single("s", stdio.clone())
        .sandbox(good.clone())
        .build()
        .expect("valid");
    assert_eq!(config.servers[0].sandbox, Some(good));

    let bad = SandboxConfig {
        read: vec![PathBuf::from("rel")],
        write: vec![PathBuf::from("~/x")],
        network: Network::ConnectPorts(vec![0]),
        best_effort: false,
    };
    let errors = Config::single("s", stdio)
        .sandbox(bad.clone())
        .build()
        .expect_err("invalid");
    let paths: Vec<_> = errors.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "mcpServers.s.sandbox.read[0]",
            "mcpServers.s.sandbox.write[0]",
            "mcpServers.s.sandbox.network.connectPorts[0]"
        ]
    );
    let http = TransportConfig::Http {
        url: "http://127.0.0.1:1/mcp".into(),
        headers: vec![],
    };
    let errors = Config::single("w", http)
        .sandbox(SandboxConfig {
            network: Network::None,
            ..bad
        })
        .build()
        .expect_err("a url server");
    assert!(
        errors
            .problems
            .iter()
            .any(|p| p.path == "mcpServers.w.sandbox" && p.message.contains("only to \"command\"")),
        "{errors}"
    );
}
