//! The PostgreSQL wire protocol (pgwire), simple and extended query protocol, over Strata's
//! SQL session.
//!
//! Statements run through `datafusion-postgres`'s `DfSessionService` on the server's
//! DataFusion context, with `pg_catalog` answered by `datafusion-pg-catalog` from Strata's own
//! tables, so psql's `\dt`, `\d` and `\l` and drivers' metadata queries work (ADR 0014 weighs
//! this against writing that layer). Users from the config file log in with SCRAM-SHA-256;
//! without users every connection is trusted and the listener binds only loopback.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::hash::BuildHasher;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion_postgres::DfSessionService;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::setup_pg_catalog;
use futures::Sink;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::{ClientInfo, ConnectionManager, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::Semaphore;

use crate::error::ServerError;
use crate::{Shared, sqlstate};

/// SCRAM's PBKDF2 rounds; PostgreSQL's default.
const SCRAM_ITERATIONS: usize = 4096;

/// Serves the PostgreSQL protocol on `listener` until the server shuts down. Open sessions are
/// closed then (PostgreSQL's "fast" shutdown).
pub async fn serve(
    listener: tokio::net::TcpListener,
    handlers: Arc<Handlers>,
    shared: Arc<Shared>,
) {
    let connections = Arc::new(Semaphore::new(shared.config.limits.max_connections));
    let mut sessions = tokio::task::JoinSet::new();
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
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            eprintln!(
                "strata: refused a PostgreSQL connection from {peer}: limits.max_connections reached"
            );
            continue;
        };
        let handlers = handlers.clone();
        sessions.spawn(async move {
            let _permit = permit;
            // A client that breaks the protocol ends its own session and nothing else.
            let _ = pgwire::tokio::process_socket(socket, None, handlers).await;
        });
        while sessions.try_join_next().is_some() {}
    }
    sessions.shutdown().await;
}

/// The handlers of every connection.
pub struct Handlers {
    service: Arc<DfSessionService>,
    users: Option<Arc<Users>>,
    connections: Arc<ConnectionManager>,
    cancel: Arc<DefaultCancelHandler>,
}

impl Handlers {
    pub fn new(shared: Arc<Shared>) -> Result<Arc<Handlers>, ServerError> {
        let context = Arc::new(shared.session.context().clone());
        setup_pg_catalog(&context, "strata", EmptyContextProvider)
            .map_err(|e| ServerError::Query((*e).into()))?;
        let users =
            (!shared.config.users.is_empty()).then(|| Arc::new(Users::new(&shared.config.users)));
        let connections = Arc::new(ConnectionManager::new());
        Ok(Arc::new(Handlers {
            service: Arc::new(DfSessionService::new(context)),
            users,
            cancel: Arc::new(DefaultCancelHandler::new(connections.clone())),
            connections,
        }))
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.service.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.service.clone()
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

/// How a connection logs in: one type for both, as pgwire asks for one handler type.
enum Startup {
    Trust(Trust),
    Scram(SASLAuthStartupHandler<DefaultServerParameterProvider>),
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            Startup::Trust(trust) => trust.on_startup(client, message).await,
            Startup::Scram(scram) => scram.on_startup(client, message).await,
        }
    }
}

/// No users configured: every connection is let in (loopback only, see `serve`).
struct Trust {
    connections: Arc<ConnectionManager>,
}

impl NoopStartupHandler for Trust {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }
}

/// The config file's users, with their SCRAM salted passwords computed once at start.
#[derive(Debug)]
pub struct Users {
    salted: HashMap<String, (Vec<u8>, Vec<u8>)>,
}

impl Users {
    fn new(users: &[crate::config::User]) -> Users {
        // A salt per user and server start; SCRAM salts are public, they only need to differ.
        let keys = RandomState::new();
        let salted = users
            .iter()
            .map(|user| {
                let mut salt = keys.hash_one(&user.name).to_le_bytes().to_vec();
                salt.extend_from_slice(&keys.hash_one((&user.name, 1u8)).to_le_bytes());
                let password = gen_salted_password(&user.password, &salt, SCRAM_ITERATIONS);
                (user.name.clone(), (salt, password))
            })
            .collect();
        Users { salted }
    }
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default();
        match self.salted.get(user) {
            Some((salt, password)) => Ok(Password::new(Some(salt.clone()), password.clone())),
            None => Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                sqlstate::INVALID_PASSWORD.into(),
                format!("password authentication failed for user \"{user}\""),
            )))),
        }
    }
}
