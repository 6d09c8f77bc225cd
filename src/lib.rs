//! Leadgate: one lead in, exactly one CRM result out, however often the request is
//! retried. See ARCHITECTURE.md for the map.

pub mod alerts;
pub mod app;
pub mod attempt;
pub mod cli;
pub mod config;
pub mod console_web;
pub mod crm;
pub mod diagnose;
pub mod feed;
pub mod fleet;
pub use leadgate_domain as domain;
pub mod intake;
pub mod metrics;
pub mod pull;
pub mod reconcile;
pub mod redeliver;
pub mod report;
pub mod spool;
pub use leadgate_store as store;
pub mod supervise;
pub mod tenants;
pub mod turns;
pub mod worker;
