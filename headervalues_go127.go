//go:build go1.27

package health

import "net/http"

// limitHeaderValues lifts net/http's cap on the number of header and
// trailer values (500 since Go 1.27) out of reach of a request that fits
// in maxRequestBytes: a request over it gets net/http's own 431, after
// which net/http sleeps 500 ms before closing, holding the connection's
// slot. Within 4 KiB no request can hold even 1,400 values, and the
// connection itself refuses anything longer.
func limitHeaderValues(srv *http.Server) { srv.MaxHeaderValueCount = maxRequestBytes }
