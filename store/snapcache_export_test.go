package store

// ResetSnapshotCache empties the snapshot cache, so that the next snapshot is a full read.
func (s *Store) ResetSnapshotCache() { s.feed.snaps.reset() }
