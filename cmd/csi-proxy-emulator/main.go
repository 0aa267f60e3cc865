//go:build windows

// Command csi-proxy-emulator is csi-proxy for a Windows host that is not
// there: it serves the disk, volume and filesystem API groups at v1 on
// csi-proxy's named pipes (and what differs between releases as the one
// --csi-proxy-version names), over an emulated host whose disks are the
// volumes the EC2 emulator has attached to the instance it plays (serial
// number = volume ID), keeping their partitions, NTFS formats, mount points
// and online state as Windows would (pkg/emulator/winhost). It is a Windows
// program; under Wine it lets the real Windows build of Diskplane's node
// plugin stage, publish, grow and unstage volumes on a Linux machine. See
// docs/windows.md.
//
//	csi-proxy-emulator --ec2-admin http://127.0.0.1:8702 --data-dir C:\csi-proxy-emulator
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/cmd/csi-proxy-emulator/internal/options"
	"github.com/diskplane/diskplane/pkg/emulator/csiproxyapi"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
	"github.com/diskplane/diskplane/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("csi-proxy-emulator", flag.ContinueOnError)
	var o options.Options
	o.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.ShowVersion {
		fmt.Println(version.Get().String())
		return 0
	}
	defer klog.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := serve(ctx, o); err != nil {
		klog.ErrorS(err, "csi-proxy-emulator stopped with an error")
		return 1
	}
	return 0
}

// serve runs the emulated host and serves csi-proxy's API groups on its
// pipes (and the admin API) until ctx ends.
func serve(ctx context.Context, o options.Options) error {
	release, err := csiproxyapi.ReleaseOf(o.Release)
	if err != nil {
		return err
	}
	host, err := winhost.New(winhost.Config{
		Source:            &winhost.EC2Source{AdminURL: o.EC2Admin, InstanceID: o.InstanceID},
		DataDir:           o.DataDir,
		MountByAccessPath: release.MountByAccessPath,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	adminDone := make(chan error, 1)
	if o.AdminListen != "" {
		l, err := net.Listen("tcp", o.AdminListen)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: csiproxyapi.AdminHandler(host)}
		go func() { <-ctx.Done(); _ = srv.Close() }()
		go func() {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				adminDone <- err
				cancel()
				return
			}
			adminDone <- nil
		}()
		klog.InfoS("Admin API", "address", l.Addr().String())
	} else {
		adminDone <- nil
	}
	dirs := o.Dirs()
	klog.InfoS("Starting csi-proxy-emulator", "version", version.Get().String(), "csiProxyVersion", release.Version,
		"ec2Admin", o.EC2Admin, "dataDir", o.DataDir, "workingDirs", dirs)
	err = csiproxyapi.Serve(ctx, host, csiproxyapi.Options{PipePrefix: o.PipePrefix, WorkingDirs: dirs, Release: release},
		func() { klog.InfoS("Serving csi-proxy's API groups on its pipes", "csiProxyVersion", release.Version) })
	cancel()
	return errors.Join(err, <-adminDone)
}
