//! Placeholder until the streamable-HTTP wire lands (see `wire.rs`).

use mcp_supervisor_core::classify::Failure;

use super::wire::{IncomingTx, Wire};
use crate::link::BoxFuture;

pub struct HttpWire {
    _incoming: IncomingTx,
}

impl HttpWire {
    pub fn new(
        _url: &str,
        _headers: &[(String, String)],
        incoming: IncomingTx,
    ) -> Result<Self, String> {
        Ok(Self {
            _incoming: incoming,
        })
    }
}

impl Wire for HttpWire {
    fn send(&self, _text: String, _request: Option<u64>) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async { Err(Failure::ConnectRefused) })
    }
}
