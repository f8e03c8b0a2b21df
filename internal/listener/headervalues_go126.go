//go:build !go1.27

package listener

import "net/http"

// limitHeaderValues does nothing before Go 1.27, whose net/http has no cap
// on the number of header values.
func limitHeaderValues(*http.Server) {}
