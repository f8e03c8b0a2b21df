//go:build !go1.27

package listener

import "net/http"

// limitHeaderValues does nothing: Go 1.26's net/http has no cap on the
// number of header values.
func limitHeaderValues(*http.Server) {}

// maxHeaderFields is no cap: Go 1.26's net/http has none, and a header
// within maxRequestBytes has fewer lines than bytes.
const maxHeaderFields = maxRequestBytes

// When Go 1.26's net/http fails to drain a body after the answer, it
// closes at once, lingering only once it has read maxDrain bytes short of
// the end; never with Expect: 100-continue, since its check for an early
// close finds the Expect wrapper where it looks for the body.
const (
	failedDrain    = holdNone
	drainGivesUpAt = maxDrain
	expectLingers  = false
)
