//go:build unix

package health

import (
	"net"
	"syscall"
)

// answerAndClose reads req, the request bytes nc holds, writes answer and
// closes nc, each with one system call that never waits, so that a client
// cannot hold Accept.
//
// The request is read first because Linux answers a close with unread
// bytes in the receive queue by a reset, which can destroy the answer
// before the client reads it; once they are read, the close sends a FIN
// behind the answer, and the client reads the whole answer and then EOF,
// as from net/http. (net/http reads them into its buffer; it would linger
// 500 ms before closing only over a body it did not read, and a plain
// probe has none.) The bytes are those the peek saw, already in the queue,
// so the read returns at once; reading them over the peeked copy changes
// nothing.
//
// The answer, under 1 KiB, goes into the empty send buffer of a fresh
// socket, so the write completes at once. Should it not (no buffer memory,
// or the client already reset), the connection is closed anyway, as
// net/http's write timeout would end it: nothing waits for a client here.
// A client that sends more after its request may see a reset too, as from
// net/http.
func answerAndClose(nc net.Conn, req, answer []byte) {
	defer nc.Close()
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	n, readErr := 0, error(nil)
	_ = rc.Read(func(fd uintptr) bool {
		n, readErr = syscall.Read(int(fd), req)
		return true // never wait
	})
	if readErr != nil || n != len(req) {
		return
	}
	_ = rc.Write(func(fd uintptr) bool {
		_, _ = syscall.Write(int(fd), answer)
		return true // never wait
	})
}
