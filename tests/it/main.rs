//! Leadgate's integration tests: one binary (link time) with a module per area.
//! Storage tests run on every backend through `each_backend!`.

mod support;

mod console;
mod console_store;
mod gateway;
mod process;
mod store;
