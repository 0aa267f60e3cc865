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
	"strings"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/csiproxyapi"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
	"github.com/diskplane/diskplane/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// options are the command's flags.
type options struct {
	ec2Admin    string
	instanceID  string
	dataDir     string
	workingDirs string
	pipePrefix  string
	adminListen string
	release     string
	showVersion bool
}

func run(args []string) int {
	fs := flag.NewFlagSet("csi-proxy-emulator", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.ec2Admin, "ec2-admin", "http://127.0.0.1:8702", "the EC2 emulator's admin API, which says what is attached")
	fs.StringVar(&o.instanceID, "instance-id", "", "the instance this host is; empty: the EC2 emulator's local instance")
	fs.StringVar(&o.dataDir, "data-dir", `C:\ProgramData\csi-proxy-emulator`, "where the host's state (state.json) is kept; empty: in memory")
	fs.StringVar(&o.workingDirs, "working-dirs", csiproxyapi.DefaultWorkingDir, "comma-separated directories the filesystem API may touch (csi-proxy's -kubelet-path)")
	fs.StringVar(&o.pipePrefix, "pipe-prefix", "", "prefix of the pipe names; empty: csi-proxy's own (csi-proxy)")
	fs.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:8703", "host:port of the admin API (GET /disks, PUT /disks, POST /faults); empty disables it")
	fs.StringVar(&o.release, "csi-proxy-version", csiproxyapi.DefaultRelease.Version, "the csi-proxy release to answer as: "+releases())
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.showVersion {
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

// releases lists the releases --csi-proxy-version takes.
func releases() string {
	var versions []string
	for _, r := range csiproxyapi.Releases {
		versions = append(versions, r.Version)
	}
	return strings.Join(versions, ", ")
}

func serve(ctx context.Context, o options) error {
	release, err := csiproxyapi.ReleaseOf(o.release)
	if err != nil {
		return err
	}
	host, err := winhost.New(winhost.Config{
		Source:            &winhost.EC2Source{AdminURL: o.ec2Admin, InstanceID: o.instanceID},
		DataDir:           o.dataDir,
		MountByAccessPath: release.MountByAccessPath,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	adminDone := make(chan error, 1)
	if o.adminListen != "" {
		l, err := net.Listen("tcp", o.adminListen)
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
	var dirs []string
	for _, d := range strings.Split(o.workingDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			dirs = append(dirs, d)
		}
	}
	klog.InfoS("Starting csi-proxy-emulator", "version", version.Get().String(), "csiProxyVersion", release.Version,
		"ec2Admin", o.ec2Admin, "dataDir", o.dataDir, "workingDirs", dirs)
	err = csiproxyapi.Serve(ctx, host, csiproxyapi.Options{PipePrefix: o.pipePrefix, WorkingDirs: dirs, Release: release},
		func() { klog.InfoS("Serving csi-proxy's API groups on its pipes", "csiProxyVersion", release.Version) })
	cancel()
	return errors.Join(err, <-adminDone)
}
