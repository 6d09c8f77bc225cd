//! Leadgate: one lead in, exactly one CRM result out, however often the request is
//! retried. See ARCHITECTURE.md for the map.

pub mod cli;
pub mod config;
pub mod crm;
pub mod domain;
pub mod report;
pub mod store;
