//! Answers to the extended query protocol's messages leave in one write per `Sync` (or `Flush`),
//! as PostgreSQL sends them.
//!
//! A driver sends `Parse`/`Bind`/`Describe`/`Execute`/`Sync` together and reads nothing before
//! `ReadyForQuery`; the protocol lets a server hold every answer until `Sync` or `Flush` ("messages
//! returned by the backend will be combined into the minimum possible number of packets").
//! pgwire's default handlers flush after `ParseComplete`, `BindComplete`, `NoData`,
//! `RowDescription` and a query's `CommandComplete`: four writes for one prepared `INSERT`, each a
//! `send` system call, a loopback delivery and a wake-up of the client. [`Deferred`] is the
//! connection as those handlers see it with its flush left out; `Sync` and `Flush` still flush the
//! real connection, and so does the framed writer whenever its buffer passes its bound, so large
//! results still stream.
//!
//! Invariant: nothing that must reach the client before it sends more goes through [`Deferred`]
//! without a flush after it: a `COPY` answer (the client waits for it before sending data) is
//! flushed by the caller (`StrataStatements::on_execute`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Sink;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, ProtocolVersion};
use tokio_rustls::rustls::pki_types::CertificateDer;

/// A connection whose flushes are left for `Sync` or `Flush` (see the module docs).
pub(super) struct Deferred<'a, C>(pub &'a mut C);

impl<C> Sink<PgWireBackendMessage> for Deferred<'_, C>
where
    C: Sink<PgWireBackendMessage> + Unpin,
{
    type Error = C::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The framed writer flushes here on its own once its buffer is full.
        Pin::new(&mut *self.get_mut().0).poll_ready(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), Self::Error> {
        Pin::new(&mut *self.get_mut().0).start_send(item)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.get_mut().0).poll_close(cx)
    }
}

impl<C: ClientPortalStore> ClientPortalStore for Deferred<'_, C> {
    type PortalStore = C::PortalStore;

    fn portal_store(&self) -> &Self::PortalStore {
        self.0.portal_store()
    }
}

impl<C: ClientInfo> ClientInfo for Deferred<'_, C> {
    fn socket_addr(&self) -> SocketAddr {
        self.0.socket_addr()
    }

    fn is_secure(&self) -> bool {
        self.0.is_secure()
    }

    fn protocol_version(&self) -> ProtocolVersion {
        self.0.protocol_version()
    }

    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.0.set_protocol_version(version)
    }

    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.0.pid_and_secret_key()
    }

    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.0.set_pid_and_secret_key(pid, secret_key)
    }

    fn state(&self) -> PgWireConnectionState {
        self.0.state()
    }

    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.0.set_state(new_state)
    }

    fn transaction_status(&self) -> TransactionStatus {
        self.0.transaction_status()
    }

    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.0.set_transaction_status(new_status)
    }

    fn metadata(&self) -> &HashMap<String, String> {
        self.0.metadata()
    }

    fn metadata_mut(&mut self) -> &mut HashMap<String, String> {
        self.0.metadata_mut()
    }

    fn session_extensions(&self) -> &pgwire::api::SessionExtensions {
        self.0.session_extensions()
    }

    fn sni_server_name(&self) -> Option<&str> {
        self.0.sni_server_name()
    }

    fn client_certificates<'a>(&self) -> Option<&[CertificateDer<'a>]> {
        self.0.client_certificates()
    }
}
