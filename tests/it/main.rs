//! Leadgate's integration tests: one binary (link time) with a module per area.
//! Storage tests run on every backend through `each_backend!`; the harness is the
//! `leadgate-testkit` crate.

mod alerts;
mod amocrm;
mod batch;
mod boundaries;
mod calls;
mod changes;
mod claim_api;
mod clock;
mod console;
mod console_store;
mod console_web;
mod contacts;
mod crm_ids;
mod diagnose;
mod feed;
mod gateway;
mod imap;
mod insiders;
mod intake_paths;
mod logins;
mod lookup;
mod metrics;
mod openapi;
mod outage;
mod process;
mod pull;
mod races;
mod refusals;
mod requests;
mod resend;
mod retention;
mod roles;
mod rules;
mod search;
mod security;
mod self_contained;
mod slow_clients;
mod slow_crm;
mod sources;
mod steps;
mod store;
mod strangers;
mod tls;
mod updates;
