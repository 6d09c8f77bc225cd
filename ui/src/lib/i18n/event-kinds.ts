// Every timeline event kind Leadgate writes: generated from the one list in Rust
// (`EventKind`, crates/leadgate-domain/src/event_kind.rs) into bindings.ts. The store
// takes only these when it appends; `tests/it/boundaries.rs` checks that the migrations'
// SQL writes only these and that each is written somewhere.
export { EVENT_KINDS, type EventKind } from "../bindings";
