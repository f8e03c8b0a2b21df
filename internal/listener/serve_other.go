//go:build !linux

package listener

import (
	"context"
	"net"
)

// serve is Serve outside Linux, which has no epoll: net/http, bounded.
func serve(ctx context.Context, ln net.Listener, opts Options, limit int) error {
	return serveHTTP(ctx, ln, opts, limit)
}
