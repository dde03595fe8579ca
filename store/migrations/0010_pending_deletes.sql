-- Deletes in progress (issue 24, item 5; store/cascade.go). An object whose delete removes more
-- objects than one transaction should hold (a bot user with thousands of API keys) is hidden
-- first, by prefixing its kind with 'deleting:', and its cascade then goes in chunks of their
-- own transactions. A process that stops halfway leaves such rows behind, and the next start
-- finishes them: this partial index holds exactly those rows (none, nearly always), so finding
-- them costs nothing and no write of an ordinary object touches it.
CREATE INDEX objects_deleting ON objects (id) WHERE kind LIKE 'deleting:%';
