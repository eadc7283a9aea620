//! The failure classifier and the replay rule (SPEC §5) as tables: every `Failure` variant, every
//! verdict, every combination of replay safety. Pure: no transport is involved.

use mcp_supervisor_core::classify::{
    AfterProbe, Failure, Recovery, STALE_SESSION_PHRASES, ToolSafety, Verdict, after_probe,
    classify, mentions_stale_session, recovery,
};

/// A non-2xx answer to a request that carried a session id.
fn http(status: u16, body: &str) -> Failure {
    Failure::HttpStatus {
        status,
        body: body.to_owned(),
        with_session: true,
    }
}

/// A non-2xx answer to a request that carried no session id.
fn http_sessionless(status: u16, body: &str) -> Failure {
    Failure::HttpStatus {
        status,
        body: body.to_owned(),
        with_session: false,
    }
}

fn rpc(code: i32, message: &str) -> Failure {
    Failure::ServerError {
        code,
        message: message.to_owned(),
        data: None,
    }
}

/// Every combination of the three safety flags.
fn every_safety() -> Vec<ToolSafety> {
    (0..8)
        .map(|bits| ToolSafety {
            read_only: bits & 1 != 0,
            idempotent: bits & 2 != 0,
            listed_in_retry_tools: bits & 4 != 0,
        })
        .collect()
}

const EVERY_VERDICT: [Verdict; 7] = [
    Verdict::ServerAnswered,
    Verdict::DeadlinePassed,
    Verdict::NotDelivered,
    Verdict::OutcomeUnknown,
    Verdict::Unclear,
    Verdict::Aborted,
    Verdict::Malformed,
];

#[test]
fn every_failure_variant_has_its_verdict() {
    let table = [
        (Failure::NoLiveGeneration, Verdict::NotDelivered),
        (Failure::ConnectRefused, Verdict::NotDelivered),
        (Failure::SessionExpired, Verdict::NotDelivered),
        (http(404, ""), Verdict::NotDelivered),
        (http(404, "anything at all"), Verdict::NotDelivered),
        (
            http(400, "Bad Request: No valid session ID provided"),
            Verdict::NotDelivered,
        ),
        (http(400, "malformed JSON"), Verdict::Unclear),
        (http(401, "Session not found"), Verdict::NotDelivered),
        (http(500, "Internal Server Error"), Verdict::Unclear),
        (http(502, ""), Verdict::Unclear),
        (http(503, "Server not initialized"), Verdict::NotDelivered),
        (
            http_sessionless(400, "Bad Request: No valid session ID provided"),
            Verdict::Unclear,
        ),
        (
            http_sessionless(503, "Server not initialized"),
            Verdict::Unclear,
        ),
        (http_sessionless(404, ""), Verdict::NotDelivered),
        // A JSON-RPC error that answers the request is the server's answer, whatever its words
        // (SPEC §5: a tool's "Session not found" may follow work it did).
        (
            rpc(-32000, "Bad Request: No valid session ID provided"),
            Verdict::ServerAnswered,
        ),
        (
            rpc(-32000, "Bad Request: Server not initialized"),
            Verdict::ServerAnswered,
        ),
        (rpc(-32001, "Session not found"), Verdict::ServerAnswered),
        (
            rpc(-32602, "Invalid params: path must be absolute"),
            Verdict::ServerAnswered,
        ),
        (rpc(-32601, "Method not found"), Verdict::ServerAnswered),
        (rpc(-32603, "Internal error"), Verdict::ServerAnswered),
        (Failure::TransportClosedBeforeSend, Verdict::NotDelivered),
        (Failure::ConnectionLostAfterSend, Verdict::OutcomeUnknown),
        (
            Failure::TransportError {
                message: "broken pipe".into(),
                connection_closed: true,
            },
            Verdict::OutcomeUnknown,
        ),
        (
            Failure::TransportError {
                message: "decode error".into(),
                connection_closed: false,
            },
            Verdict::Unclear,
        ),
        (Failure::DeadlinePassed, Verdict::DeadlinePassed),
        (Failure::CancelledByCaller, Verdict::Aborted),
        (Failure::UnexpectedResponse, Verdict::Malformed),
        (
            Failure::Unauthorized {
                message: "run login".into(),
            },
            Verdict::ServerAnswered,
        ),
    ];
    for (failure, verdict) in table {
        assert_eq!(classify(&failure), verdict, "{failure:?}");
    }
}

#[test]
fn stale_session_phrases_match_case_insensitively_anywhere() {
    for phrase in STALE_SESSION_PHRASES {
        for text in [
            phrase.to_owned(),
            phrase.to_uppercase(),
            format!("Bad Request: {phrase}."),
            format!(
                "{{\"error\":{{\"message\":\"{}\"}}}}",
                phrase.to_uppercase()
            ),
        ] {
            assert!(mentions_stale_session(&text), "{text}");
            assert_eq!(classify(&rpc(-32000, &text)), Verdict::ServerAnswered);
            assert_eq!(classify(&http(400, &text)), Verdict::NotDelivered);
            assert_eq!(classify(&http_sessionless(400, &text)), Verdict::Unclear);
        }
    }
    for text in [
        "",
        "session",
        "valid session",
        "Server initialized",
        "not found",
    ] {
        assert!(!mentions_stale_session(text), "{text}");
    }
}

#[test]
fn any_flag_makes_a_tool_replay_safe() {
    for safety in every_safety() {
        let expected = safety.read_only || safety.idempotent || safety.listed_in_retry_tools;
        assert_eq!(safety.replay_safe(), expected, "{safety:?}");
    }
    assert!(!ToolSafety::default().replay_safe());
}

#[test]
fn recovery_for_every_verdict_and_every_safety() {
    for safety in every_safety() {
        for verdict in EVERY_VERDICT {
            let expected = match verdict {
                Verdict::NotDelivered => Recovery::ReconnectAndSend,
                Verdict::OutcomeUnknown if safety.replay_safe() => Recovery::ReconnectAndSend,
                Verdict::OutcomeUnknown => Recovery::ReconnectAndFailUnknown,
                Verdict::Unclear => Recovery::Probe,
                Verdict::ServerAnswered
                | Verdict::DeadlinePassed
                | Verdict::Aborted
                | Verdict::Malformed => Recovery::Return,
            };
            assert_eq!(
                recovery(verdict, safety),
                expected,
                "{verdict:?} {safety:?}"
            );
        }
    }
}

#[test]
fn a_non_idempotent_tool_is_never_sent_twice_after_an_unknown_outcome() {
    let unsafe_tool = ToolSafety::default();
    assert_eq!(
        recovery(classify(&Failure::ConnectionLostAfterSend), unsafe_tool),
        Recovery::ReconnectAndFailUnknown
    );
    assert_eq!(after_probe(true, unsafe_tool), AfterProbe::FailUnknown);
    assert_eq!(
        after_probe(false, unsafe_tool),
        AfterProbe::Reconnect(Recovery::ReconnectAndFailUnknown)
    );
    // But one that never reached the server is sent again whatever it is.
    assert_eq!(
        recovery(classify(&Failure::ConnectRefused), unsafe_tool),
        Recovery::ReconnectAndSend
    );
}

#[test]
fn after_a_probe_alive_sends_again_in_place_and_dead_reconnects_under_the_same_rule() {
    for safety in every_safety() {
        let alive = after_probe(true, safety);
        let dead = after_probe(false, safety);
        if safety.replay_safe() {
            assert_eq!(alive, AfterProbe::SendAgain);
            assert_eq!(dead, AfterProbe::Reconnect(Recovery::ReconnectAndSend));
        } else {
            assert_eq!(alive, AfterProbe::FailUnknown);
            assert_eq!(
                dead,
                AfterProbe::Reconnect(Recovery::ReconnectAndFailUnknown)
            );
        }
    }
}

#[test]
fn answers_deadlines_cancellations_and_malformed_replies_are_returned_as_they_are() {
    for failure in [
        rpc(-32602, "bad params"),
        Failure::DeadlinePassed,
        Failure::CancelledByCaller,
        Failure::UnexpectedResponse,
        // A refused authorization is not a broken connection: no reconnect, no replay.
        Failure::Unauthorized {
            message: "run login".into(),
        },
    ] {
        for safety in every_safety() {
            assert_eq!(recovery(classify(&failure), safety), Recovery::Return);
        }
    }
}
