package certmgr

import "github.com/edgeplane/edgeplane/store"

// RunOnce runs one job for the domain as a scan that chose it would (marked running, counted in
// the wait group), for tests of what a run finds when it starts late: the domain certified since
// the scan read it. It reports false when a run for the domain is already under way.
func (m *Manager) RunOnce(md store.ManagedDomain) bool {
	m.mu.Lock()
	busy := m.running[md.Domain.ID]
	if !busy {
		m.running[md.Domain.ID] = true
		m.wg.Add(1)
	}
	m.mu.Unlock()
	if !busy {
		m.run(md)
	}
	return !busy
}
