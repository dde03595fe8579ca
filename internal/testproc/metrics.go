package testproc

import (
	"strconv"
	"strings"
	"testing"
)

// SeriesValue returns the value of one series in a Prometheus text exposition (what GET /metrics
// answers), for the tests of the API's metrics, of serve's and of the data plane's. series is the
// metric's name with its labels as the exposition writes them, sorted by label name, such as
// `edgeplane_connections_total{listener="api",result="accepted"}`, or the bare name of an
// unlabelled metric. ok is false when no line holds the series; a value that does not parse
// fails the test.
func SeriesValue(t testing.TB, exposition, series string) (v float64, ok bool) {
	t.Helper()
	for line := range strings.Lines(exposition) {
		if rest, found := strings.CutPrefix(line, series+" "); found {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", strings.TrimSpace(line), err)
			}
			return f, true
		}
	}
	return 0, false
}
