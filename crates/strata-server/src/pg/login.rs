//! Logging in over the PostgreSQL protocol: trust (no users configured, loopback only) or
//! SCRAM-SHA-256 against the config file's users.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::hash::BuildHasher;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::gen_salted_password;
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::{ClientInfo, ConnectionManager};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::sqlstate;

/// SCRAM's PBKDF2 rounds; PostgreSQL's default.
pub const SCRAM_ITERATIONS: usize = 4096;

/// How a connection logs in: one type for both, as pgwire asks for one handler type.
pub enum Startup {
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
pub struct Trust {
    pub connections: Arc<ConnectionManager>,
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
    pub fn new(users: &[crate::config::User]) -> Users {
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
