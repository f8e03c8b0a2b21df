package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// kernelCounters reads the kernel's TCP listen counters from
// /proc/net/netstat: what the kernel itself did with handshakes it could
// not queue. They count the whole machine, which during a run is this
// command's loopback traffic; elsewhere than Linux they read as zero.
type kernelCounters struct {
	listenOverflows int64 // a completed handshake found the accept queue full and was dropped
	synQueueCookies int64 // the SYN queue was full, so the kernel answered with a SYN cookie
	synQueueDrops   int64 // the SYN queue was full and the SYN was dropped
}

func readKernelCounters() kernelCounters {
	f, err := os.Open("/proc/net/netstat")
	if err != nil {
		return kernelCounters{}
	}
	defer f.Close()
	var keys []string
	var kc kernelCounters
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "TcpExt:" {
			continue
		}
		if keys == nil {
			keys = fields
			continue
		}
		for i, v := range fields {
			n, _ := strconv.ParseInt(v, 10, 64)
			if i >= len(keys) {
				break
			}
			switch keys[i] {
			case "ListenOverflows":
				kc.listenOverflows = n
			case "TCPReqQFullDoCookies":
				kc.synQueueCookies = n
			case "TCPReqQFullDrop":
				kc.synQueueDrops = n
			}
		}
	}
	return kc
}

func (a kernelCounters) since(b kernelCounters) kernelCounters {
	return kernelCounters{
		listenOverflows: a.listenOverflows - b.listenOverflows,
		synQueueCookies: a.synQueueCookies - b.synQueueCookies,
		synQueueDrops:   a.synQueueDrops - b.synQueueDrops,
	}
}
