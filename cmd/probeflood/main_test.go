package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tool sends floods; it must refuse any target but loopback.
func TestRequireLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9101", "127.1.2.3:80", "[::1]:9101"} {
		assert.NoError(t, requireLoopback(addr), addr)
	}
	for _, addr := range []string{"10.0.0.1:9101", "192.168.1.1:9101", "localhost:9101", "example.org:80", "[::]:9101", "0.0.0.0:9101", "9101", ""} {
		assert.Error(t, requireLoopback(addr), addr)
	}
}

func TestSelectLoads(t *testing.T) {
	custom := load{slowloris: 10, idle: 20, churn: -1, serverNofile: 512, probeDelay: 5 * time.Millisecond}
	loads, err := selectLoads("4, 1,custom", custom)
	require.NoError(t, err)
	require.Len(t, loads, 3)
	assert.Equal(t, 4, loads[0].id)
	assert.Equal(t, 1, loads[1].id)
	assert.Equal(t, "custom: 10 slowloris + 20 idle + -1 churn, server fd limit 512, probe delay 5ms", loads[2].name)
	assert.Equal(t, 20, loads[2].idle)
	_, err = selectLoads("6", custom)
	assert.EqualError(t, err, `-load: no load "6" (have 1 to 5, and custom)`)
}

func TestSummary(t *testing.T) {
	var os []outcome
	for i := 1; i <= 100; i++ {
		os = append(os, outcome{ok: i != 50, latency: time.Duration(i) * time.Millisecond})
	}
	share, p50, p99 := summary(os)
	assert.Equal(t, 0.99, share)
	assert.Equal(t, 51*time.Millisecond, p50)
	assert.Equal(t, 100*time.Millisecond, p99)
	share, _, _ = summary(nil)
	assert.Zero(t, share)
}
