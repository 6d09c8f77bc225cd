// The event feed's types, as subscribers name them (store::FEED_EVENT_TYPES; a subscriber
// of every one is shown as "all").
export const FEED_EVENTS = [
  "operation.completed",
  "operation.failed",
  "review.opened",
  "review.resolved",
  "connector.paused",
  "connector.unreachable",
  "connector.resumed",
] as const;
