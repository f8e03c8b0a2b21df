//go:build go1.27

package listener

import "net/http"

// limitHeaderValues lifts net/http's cap on the number of header and
// trailer values (500 since Go 1.27), past which it answers 431 and
// lingers, out of reach: net/http counts a header line as one value and a
// Trailer header's values by its commas, so a request within
// maxRequestBytes carries fewer values than it has bytes.
func limitHeaderValues(srv *http.Server) { srv.MaxHeaderValueCount = maxRequestBytes }

// maxHeaderFields is Go 1.27's cap on a header's values
// (http.DefaultMaxHeaderValueCount), past which net/http answers 431 and
// lingers: the room and the slots' reads refuse as it does, before
// net/http builds a map of them all (headerScanner.tooManyFields).
const maxHeaderFields = 500

// Go 1.27's net/http lingers after any drain that did not reach the
// body's end, which it looks for one byte past maxDrain.
const (
	failedDrain    = holdLinger
	drainGivesUpAt = maxDrain + 1
	expectLingers  = true
)
