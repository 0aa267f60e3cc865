//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// controller runs the real diskplane binary in controller mode, as a
// Deployment's container does, and kills it with SIGKILL on demand; like
// the kubelet, it starts it again at once.
type controller struct {
	bin     string
	socket  string
	logDir  string
	environ []string
	args    []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	starts  int
	stopped bool
}

// start runs the first process.
func (c *controller) start(t *testing.T) {
	t.Helper()
	if err := c.launch(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
}

// launch starts one process; its output goes to its own log file.
func (c *controller) launch() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starts++
	log, err := os.Create(filepath.Join(c.logDir, fmt.Sprintf("controller-%02d.log", c.starts)))
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, append([]string{"--mode=controller", "--endpoint=unix://" + c.socket}, c.args...)...)
	cmd.Env = c.environ
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start the controller: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(exited)
	}()
	c.cmd, c.exited = cmd, exited
	return nil
}

// kill sends SIGKILL, waits until the process is gone and starts a new one.
func (c *controller) kill() error {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the controller: %w", err)
	}
	<-exited
	return c.launch()
}

// killAtRandom kills the controller after random pauses in [minGap,
// maxGap] until ctx ends, and reports how many times it did.
func (c *controller) killAtRandom(ctx context.Context, r *lockedRand, minGap, maxGap time.Duration) (int, error) {
	kills := 0
	for {
		gap := minGap + time.Duration(r.Int64N(int64(maxGap-minGap)+1))
		select {
		case <-ctx.Done():
			return kills, nil
		case <-time.After(gap):
		}
		if err := c.kill(); err != nil {
			return kills, err
		}
		kills++
	}
}

// stop kills the last process for good.
func (c *controller) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.cmd == nil {
		return
	}
	c.stopped = true
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}
