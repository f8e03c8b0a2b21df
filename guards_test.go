package health

import (
	"context"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResponse431IsNetHTTPs sends the same oversized requests to Serve and
// to a stock http.Server with Serve's MaxHeaderBytes, over TCP: both
// answer response431, byte for byte. A header over what net/http reads
// gets net/http's 431 from both. So, on a Go whose net/http caps header
// values (1.27 on), does a header over that cap, which Serve refuses for
// its lines; on an older Go, net/http lets it through.
func TestResponse431IsNetHTTPs(t *testing.T) {
	stockLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stock := &http.Server{Handler: http.NotFoundHandler(), MaxHeaderBytes: maxHeaderBytes, ReadHeaderTimeout: readHeaderTimeout}
	stock.SetKeepAlivesEnabled(false) // as Serve: one request, then close
	served := make(chan error, 1)
	go func() { served <- stock.Serve(stockLn) }()
	t.Cleanup(func() {
		// Shutdown waits out the 500 ms net/http lingers after its 431.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, stock.Shutdown(ctx))
		assert.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	stockAddr, healthAddr := stockLn.Addr().String(), serveReady(t)

	bigHeader := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes+4<<10) + "\r\n\r\n"
	assert.Equal(t, response431, exchange(t, stockAddr, bigHeader), "net/http")
	assert.Equal(t, response431, exchange(t, healthAddr, bigHeader), "Serve")

	manyValues := "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("a: 1\r\n", 500) + "\r\n" // 501 values
	assert.Equal(t, response431, exchange(t, healthAddr, manyValues), "Serve")
	if _, capsValues := reflect.TypeFor[http.Server]().FieldByName("MaxHeaderValueCount"); capsValues {
		assert.Equal(t, response431, exchange(t, stockAddr, manyValues), "net/http")
	} else {
		assert.True(t, strings.HasPrefix(exchange(t, stockAddr, manyValues), "HTTP/1.1 404 Not Found\r\n"), "net/http before Go 1.27 has no cap on values")
	}
}

func TestOversizedHeaderNeverOK(t *testing.T) {
	addr := serveReady(t)
	for _, size := range []int{9 << 10, 64 << 10, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go func() {
				// The server may close before all is written; that is the point.
				_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", size)+"\r\n\r\n")
			}()
			got, _ := io.ReadAll(c)
			assert.NotContains(t, string(got), " 200 ")
			if len(got) > 0 {
				assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 431 "), "%q", got)
			}
		})
	}
}
