//! The PostgreSQL wire protocol (pgwire), simple and extended query protocol, over Strata's
//! SQL session: the listener and the handlers of each connection (`login`: how it logs in;
//! `statements`: limits, timeout and cancel around each statement).
//!
//! Statements run through `datafusion-postgres`'s `DfSessionService` on the server's
//! DataFusion context, with `pg_catalog` answered by `datafusion-pg-catalog` from Strata's own
//! tables, so psql's `\dt`, `\d` and `\l` and drivers' metadata queries work (ADR 0014 weighs
//! this against writing that layer). Users from the config file log in with SCRAM-SHA-256;
//! without users every connection is trusted and the listener binds only loopback.

use std::sync::Arc;

use datafusion_postgres::DfSessionService;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::setup_pg_catalog;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::{DefaultServerParameterProvider, StartupHandler};
use pgwire::api::{ConnectionManager, PgWireServerHandlers};
use tokio::sync::Semaphore;

use crate::Shared;
use crate::error::ServerError;
use crate::sqlstate;
use login::{SCRAM_ITERATIONS, Startup, Trust, Users};
use pgwire::error::ErrorInfo;
use statements::{CancelRegistry, StrataStatements};
use transactions::OpenSlots;

pub(crate) use connection_threads::ConnectionThreads;

mod connection_threads;
mod deferred_flush;
mod login;
mod parameters;
mod prepared;
mod statements;
mod transactions;

/// Serves the PostgreSQL protocol on `listener` until the server shuts down, each connection
/// on one of `threads` (`connection_threads`). Open sessions are closed then (PostgreSQL's
/// "fast" shutdown).
pub async fn serve(
    listener: tokio::net::TcpListener,
    handlers: Arc<Handlers>,
    threads: ConnectionThreads,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let connections = Arc::new(Semaphore::new(shared.config.limits.max_connections));
    let mut sessions = tokio::task::JoinSet::new();
    let idle_timeout = shared.config.limits.idle_in_transaction_timeout_secs;
    if idle_timeout > 0.0 {
        let timeout = std::time::Duration::from_secs_f64(idle_timeout);
        // Looked at four times per timeout (at most once a second): a block ends at most a
        // quarter of the timeout late.
        let period = (timeout / 4).clamp(
            std::time::Duration::from_millis(50),
            std::time::Duration::from_secs(1),
        );
        let (slots, shutdown) = (handlers.slots.clone(), shared.shutdown.clone());
        sessions.spawn(async move {
            let mut ticks = tokio::time::interval(period);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = ticks.tick() => {
                        slots.sweep(timeout);
                    }
                }
            }
        });
    }
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (socket, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("strata: PostgreSQL accept failed: {e}");
                continue;
            }
        };
        let handlers = handlers.clone();
        let tls = tls.clone();
        let connections = connections.clone();
        // The socket moves to its connection thread's runtime (registered there, not here).
        let (socket, (runtime, served)) = match (socket.into_std(), threads.least_loaded()) {
            (Ok(socket), Some(thread)) => (socket, thread),
            (Err(e), _) => {
                eprintln!("strata: PostgreSQL connection from {peer} dropped: {e}");
                continue;
            }
            (Ok(_), None) => {
                eprintln!(
                    "strata: PostgreSQL connection from {peer} dropped: no connection thread"
                );
                continue;
            }
        };
        let session = async move {
            let _served = served;
            let mut socket = match tokio::net::TcpStream::from_std(socket) {
                Ok(socket) => socket,
                Err(e) => {
                    eprintln!("strata: PostgreSQL connection from {peer} dropped: {e}");
                    return;
                }
            };
            // A cancel request comes on a connection of its own and takes no slot: a client
            // can stop a statement even when every slot is taken (as in PostgreSQL).
            if answer_cancel_request(&mut socket, &handlers.cancel).await {
                return;
            }
            // A session that just ended may not have given its slot back yet (libpq, for one,
            // reconnects at once after a declined GSSENCRequest): a moment's grace.
            let permit = tokio::time::timeout(
                std::time::Duration::from_secs(1),
                connections.acquire_owned(),
            )
            .await;
            let Ok(Ok(_permit)) = permit else {
                eprintln!(
                    "strata: refused a PostgreSQL connection from {peer}: limits.max_connections reached"
                );
                return refuse(socket).await;
            };
            // A client that breaks the protocol ends its own session and nothing else.
            let _ = pgwire::tokio::process_socket(socket, tls, handlers).await;
        };
        sessions.spawn_on(session, &runtime);
        while sessions.try_join_next().is_some() {}
    }
    sessions.shutdown().await;
    // The threads end with the shutdown token; waited for off the runtime's workers.
    let _ = tokio::task::spawn_blocking(move || threads.join()).await;
}

/// The first message of a PostgreSQL connection that asks to cancel a statement: its length (16
/// with a 4-byte secret key) and this code.
const CANCEL_REQUEST_CODE: i32 = 80877102;

/// When the connection's first message is a CancelRequest, reads it, cancels the statement it
/// names and returns true (the connection then closes without an answer, as in PostgreSQL).
/// Otherwise leaves the bytes unread for the session.
async fn answer_cancel_request(
    socket: &mut tokio::net::TcpStream,
    registry: &statements::CancelRegistry,
) -> bool {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 8];
    // A client that has sent nothing yet is left to the session's own handling.
    let peeked =
        tokio::time::timeout(std::time::Duration::from_secs(5), socket.peek(&mut head)).await;
    if !matches!(peeked, Ok(Ok(8))) {
        return false;
    }
    let length = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let code = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    // Protocol 3.2 allows secret keys of up to 256 bytes.
    if code != CANCEL_REQUEST_CODE || !(12..=8 + 4 + 256).contains(&length) {
        return false;
    }
    let mut message = vec![0u8; length as usize];
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        socket.read_exact(&mut message),
    )
    .await;
    if matches!(read, Ok(Ok(_))) {
        let pid = i32::from_be_bytes([message[8], message[9], message[10], message[11]]);
        registry.cancel(pid, message[12..].to_vec());
    }
    true
}

/// Answers a connection over `limits.max_connections` as PostgreSQL does: its startup message
/// gets `FATAL 53300 sorry, too many clients already`, then the socket closes. An SSLRequest is
/// declined first (the refusal is not worth a handshake); a client that sends nothing within
/// five seconds is dropped.
async fn refuse(mut socket: tokio::net::TcpStream) {
    use pgwire::messages::Message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer = async {
        loop {
            let length = socket.read_i32().await? as usize;
            let mut body = vec![0u8; length.saturating_sub(4).min(10_000)];
            socket.read_exact(&mut body).await?;
            let ssl = length == 8
                && body[..4]
                    == pgwire::messages::startup::SslRequest::BODY_MAGIC_NUMBER.to_be_bytes();
            if !ssl {
                break;
            }
            socket.write_all(b"N").await?;
        }
        let error = pgwire::messages::response::ErrorResponse::from(ErrorInfo::new(
            "FATAL".into(),
            sqlstate::TOO_MANY_CONNECTIONS.into(),
            "sorry, too many clients already (limits.max_connections)".into(),
        ));
        let mut buffer = bytes::BytesMut::new();
        error.encode(&mut buffer).map_err(std::io::Error::other)?;
        socket.write_all(&buffer).await?;
        socket.shutdown().await
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), answer).await;
}

/// The handlers of every connection.
pub struct Handlers {
    statements: Arc<StrataStatements>,
    users: Option<Arc<Users>>,
    /// pgwire's registry of connections (it also answers its own cancel signal, which only
    /// covers planning; [`CancelRegistry`] covers the rows too).
    connections: Arc<ConnectionManager>,
    cancel: Arc<CancelRegistry>,
    /// Every connection's transaction block (see `transactions::OpenSlots`).
    slots: Arc<OpenSlots>,
}

impl Handlers {
    pub fn new(shared: Arc<Shared>) -> Result<Arc<Handlers>, ServerError> {
        let context = Arc::new(shared.session.context().clone());
        setup_pg_catalog(&context, "strata", EmptyContextProvider)
            .map_err(|e| ServerError::Query((*e).into()))?;
        // The catalog installed its type planner in place of Strata's.
        strata_query::install_json_types(&context);
        let users =
            (!shared.config.users.is_empty()).then(|| Arc::new(Users::new(&shared.config.users)));
        let cancel = Arc::new(CancelRegistry::default());
        let slots = Arc::new(OpenSlots::default());
        let statements = StrataStatements::new(
            Arc::new(DfSessionService::new(context)),
            shared,
            cancel.clone(),
            slots.clone(),
        );
        Ok(Arc::new(Handlers {
            statements: Arc::new(statements),
            users,
            connections: Arc::new(ConnectionManager::new()),
            cancel,
            slots,
        }))
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.statements.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.statements.clone()
    }

    /// A new handler per connection: SASL keeps the state of one exchange.
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(match &self.users {
            Some(users) => {
                let mut scram = ScramAuth::new(users.clone());
                scram.set_iterations(SCRAM_ITERATIONS);
                Startup::Scram(
                    SASLAuthStartupHandler::new(
                        Arc::new(DefaultServerParameterProvider::default()),
                    )
                    .with_scram(scram)
                    .with_connection_manager(self.connections.clone()),
                )
            }
            None => Startup::Trust(Trust {
                connections: self.connections.clone(),
            }),
        })
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}
