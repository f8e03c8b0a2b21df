//go:build !go1.27

package listener

import "net/http"

// limitHeaderValues does nothing before Go 1.27, whose net/http has no cap
// on the number of header values.
func limitHeaderValues(*http.Server) {}

// What Go 1.26's net/http does when its drain of a body after the answer
// fails (see hold.go): it closes at once, and lingers only once it has
// read maxDrain bytes without reaching the end; and never with Expect:
// 100-continue, since its check for an early close finds the Expect
// wrapper where it looks for the body.
const (
	failedDrain    = holdNone
	drainGivesUpAt = maxDrain
	expectLingers  = false
)
