//! Leadgate's integration tests: one binary (link time) with a module per area.
//! Storage tests run on every backend through `support::each_backend!`.

mod support;

mod store;
