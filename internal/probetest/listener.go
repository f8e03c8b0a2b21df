package probetest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Faults are what a Listener does unlike the real listener it wraps. The
// zero value does nothing unlike it.
type Faults struct {
	// FailAfter, when positive, makes Accept fail with Err once it has
	// accepted that many connections: a listener that fails on its own.
	FailAfter int
	Err       error
	// OutOfDescriptorsAt, when positive, makes Accept fail as accept(2)
	// does when the process has no descriptor left (EMFILE) while that
	// many of its connections are open.
	OutOfDescriptorsAt int
	// Limit, when positive, has Accept count the calls it gets while
	// that many of its connections are open (Counts.OverLimit): one more
	// would exceed a bound of Limit.
	Limit int
	// SyscallConnErr, when set, is what SyscallConn returns: a listener
	// whose descriptor cannot be had.
	SyscallConnErr error
	// ControlErr, when set, is what the RawConn's Control returns: a
	// socket whose descriptor cannot be reached, so that any poll or
	// setsockopt on it fails.
	ControlErr error
	// HideConnDescriptors hides the descriptor of every connection it
	// accepts, as a listener made by other means than a plain TCP one may.
	HideConnDescriptors bool
	// ReadGate, when set, holds every Read of the connections it accepts
	// until it is closed: a server's goroutine that has not yet read what
	// its client sent, for as long as a test needs.
	ReadGate chan struct{}
}

// Listener is the one fake listener of the tests: a real loopback TCP
// listener, with Faults, that counts the connections it has accepted and
// not yet closed. It shows its socket (SyscallConn) as the real one does,
// unless Faults say otherwise; HideDescriptor hides it altogether.
type Listener struct {
	net.Listener
	faults Faults

	mu     sync.Mutex
	counts ListenerCounts
}

// ListenerCounts are what a Listener has seen.
type ListenerCounts struct {
	Accepted         int // connections accepted
	Open             int // of those, not yet closed
	MaxOpen          int // the most open at once
	OverLimit        int // Accept calls while Faults.Limit were open
	OutOfDescriptors int // Accept calls failed for lack of descriptors
}

// NewListener wraps inner, a TCP listener, with faults.
func NewListener(inner net.Listener, faults Faults) *Listener {
	return &Listener{Listener: inner, faults: faults}
}

// Accept accepts as inner does, but for faults.
func (l *Listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	f := l.faults
	if f.Limit > 0 && l.counts.Open >= f.Limit {
		l.counts.OverLimit++
	}
	if f.FailAfter > 0 && l.counts.Accepted >= f.FailAfter {
		l.mu.Unlock()
		return nil, f.Err
	}
	if f.OutOfDescriptorsAt > 0 && l.counts.Open >= f.OutOfDescriptorsAt {
		l.counts.OutOfDescriptors++
		l.mu.Unlock()
		return nil, OutOfDescriptorsError()
	}
	l.mu.Unlock()
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts.Accepted++
	l.counts.Open++
	l.counts.MaxOpen = max(l.counts.MaxOpen, l.counts.Open)
	counted := &countedConn{Conn: c, l: l}
	if f.HideConnDescriptors {
		return struct{ net.Conn }{counted}, nil
	}
	return counted, nil
}

// SyscallConn shows inner's socket, but for faults.
func (l *Listener) SyscallConn() (syscall.RawConn, error) {
	if l.faults.SyscallConnErr != nil {
		return nil, l.faults.SyscallConnErr
	}
	sc, ok := l.Listener.(syscall.Conn)
	if !ok {
		return nil, errNoDescriptor
	}
	rc, err := sc.SyscallConn()
	if err != nil || l.faults.ControlErr == nil {
		return rc, err
	}
	return failingControl{RawConn: rc, err: l.faults.ControlErr}, nil
}

// Counts returns what l has seen so far.
func (l *Listener) Counts() ListenerCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts
}

var errNoDescriptor = errors.New("probetest: the wrapped listener or connection has no descriptor")

// HideDescriptor returns ln without its SyscallConn, as a wrapper of
// another package's may be: nothing can reach its socket.
func HideDescriptor(ln net.Listener) net.Listener { return struct{ net.Listener }{ln} }

// OutOfDescriptorsError is accept's error when the process has no
// descriptor left.
func OutOfDescriptorsError() error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

type failingControl struct {
	syscall.RawConn
	err error
}

func (c failingControl) Control(func(uintptr)) error { return c.err }

// countedConn is a connection of a Listener's, counted open until it is
// closed. It shows its socket, as an accepted TCP connection does.
type countedConn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *countedConn) Read(p []byte) (int, error) {
	if gate := c.l.faults.ReadGate; gate != nil {
		<-gate
	}
	return c.Conn.Read(p)
}

func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoDescriptor
	}
	return sc.SyscallConn()
}

// CloseWrite shuts the sending side, as a TCP connection's does, on which
// a linger's FIN depends.
func (c *countedConn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.ErrUnsupported
	}
	return cw.CloseWrite()
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.counts.Open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// Listen returns a fresh TCP listener on 127.0.0.1:0, closed at the
// test's end.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// ServeHTTP is the one way a test runs a plain net/http server, the
// reference Serve is compared with: it serves srv on ln (a fresh
// 127.0.0.1:0 listener when nil) and returns its address. At the test's
// end it shuts srv down, waiting out net/http's linger after a refusal
// (500 ms), and fails the test if that takes 10 s or Serve returns
// anything but http.ErrServerClosed.
func ServeHTTP(t testing.TB, srv *http.Server, ln net.Listener) string {
	t.Helper()
	if ln == nil {
		ln = Listen(t)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("the reference server's shutdown: %v", err)
			_ = srv.Close()
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the reference server's Serve returned %v", err)
		}
	})
	return ln.Addr().String()
}
