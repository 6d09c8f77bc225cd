//! Fake CRMs (and alert channels) for Leadgate's tests and demo: real HTTP servers that
//! speak Bitrix24's and amoCRM's wire formats (and Telegram's Bot API and Slack-compatible
//! webhooks: [`telegram`], [`webhook`]), keep their entities in memory and take injected
//! faults — above all "the CRM created the entity and the answer was lost". Not part of the product:
//! the shipped `leadgate` binary has none of this; `leadgate-dev fake-crm` serves them.
//!
//! This crate knows nothing of Leadgate's library, so the adapters' own unit tests in
//! `leadgate::crm` use it as a dev-dependency.

pub mod amocrm;
pub mod bitrix24;
pub mod black_hole;
pub mod control;
mod limit;
pub mod telegram;
pub mod webhook;

pub use control::{FaultRule, RandomFault};
