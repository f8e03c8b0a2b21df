package main

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The server child counts the lines of WARN and above its logger gets,
// through derived loggers too, whatever its handler writes; plain's
// net/http error log counts as ERROR lines.
func TestCountingHandler(t *testing.T) {
	var n atomic.Int64
	var out bytes.Buffer
	logger := slog.New(countingHandler{Handler: slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}), n: &n})
	logger.Info("not counted")
	logger.Warn("one")
	logger.With("k", "v").Error("two")
	logger.WithGroup("g").Log(context.Background(), slog.LevelError+4, "three")
	assert.EqualValues(t, 3, n.Load())
	assert.Equal(t, 3, bytes.Count(out.Bytes(), []byte("\n")), "the handler still writes them:\n%s", &out)
	assert.NotContains(t, out.String(), "not counted")

	n.Store(0)
	errorLog := slog.NewLogLogger(countingHandler{Handler: slog.DiscardHandler, n: &n}, slog.LevelError)
	errorLog.Printf("http: Accept error: too many open files; retrying in 5ms")
	errorLog.Printf("http: TLS handshake error")
	assert.EqualValues(t, 2, n.Load())
}
