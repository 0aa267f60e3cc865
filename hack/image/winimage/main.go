// Command winimage writes the HostProcess flavour of the Windows image
// (Dockerfile.windows, stage hostprocess) as an OCI image archive without a
// Windows machine or the HostProcess base image: the stage's labels, copies
// and entrypoint applied onto one Windows base layer that carries what the
// base image carries (empty registry hives) next to the copied binary.
//
// A HostProcess container runs its image's files on the host, so the image
// needs no Windows files of its own; containerd still imports its first
// layer as a Windows base layer, which must carry registry hives. One layer
// instead of the base image's and a layer on it: a layer above a base whose
// hives are empty files (the base image v1.0.0) is refused by newer Windows
// builds ("The configuration registry database is corrupt").
//
//	winimage -name ghcr.io/diskplane/diskplane-windows:v0.1.0-hostprocess \
//	  -build-arg VERSION=v0.1.0 -o diskplane-windows-hostprocess.oci.tar
//
// Each COPY --from=builder of the stage takes its file from the build
// context (-context) at the builder's path below -builder-dir, where `make
// build-windows` leaves it. The image is dated -created, or
// SOURCE_DATE_EPOCH: the same inputs give the same archive.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/diskplane/diskplane/hack/image/winimage/wcow"
)

// buildArgs collects repeated -build-arg KEY=VALUE flags.
type buildArgs map[string]string

func (b buildArgs) String() string { return fmt.Sprint(map[string]string(b)) }

func (b buildArgs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	b[k] = v
	return nil
}

func main() {
	args := buildArgs{}
	dockerfile := flag.String("dockerfile", "Dockerfile.windows", "the Dockerfile")
	target := flag.String("target", "hostprocess", "its stage to apply")
	context := flag.String("context", ".", "the build context (the repository)")
	builderDir := flag.String("builder-dir", "/src", "where the builder stage has the build context (its WORKDIR)")
	name := flag.String("name", "", "the image name and tag (required)")
	created := flag.String("created", "", "the image's date, RFC 3339 (default: SOURCE_DATE_EPOCH)")
	out := flag.String("o", "", "the OCI image archive to write (required)")
	flag.Var(args, "build-arg", "KEY=VALUE for an ARG of the stage (repeatable)")
	flag.Parse()
	if *name == "" || *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	when, err := imageTime(*created, os.Getenv("SOURCE_DATE_EPOCH"))
	if err == nil {
		err = run(*dockerfile, *target, *context, *builderDir, *name, *out, args, when)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "winimage:", err)
		os.Exit(1)
	}
}

// imageTime is the image's date: created (RFC 3339), else epoch (seconds
// since 1970), one of which is required.
func imageTime(created, epoch string) (time.Time, error) {
	switch {
	case created != "":
		return time.Parse(time.RFC3339, created)
	case epoch != "":
		s, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
		}
		return time.Unix(s, 0).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("set -created or SOURCE_DATE_EPOCH (the image must not depend on when it is built)")
}

// run writes the image of stage target of dockerfile to out.
func run(dockerfile, target, context, builderDir, name, out string, args buildArgs, created time.Time) error {
	f, err := os.Open(dockerfile)
	if err != nil {
		return err
	}
	st, err := readStage(f, target, args)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", dockerfile, err)
	}
	if len(st.copies) == 0 || st.entrypoint == nil {
		return fmt.Errorf("%s: stage %s copies nothing or has no ENTRYPOINT", dockerfile, target)
	}
	var files []wcow.File
	var dests []string
	for _, c := range st.copies {
		rel, ok := strings.CutPrefix(c.src, strings.TrimSuffix(builderDir, "/")+"/")
		if c.from != "builder" || !ok {
			return fmt.Errorf("COPY --from=%s %s: only files of the builder stage below %s are taken", c.from, c.src, builderDir)
		}
		data, err := os.ReadFile(filepath.Join(context, filepath.FromSlash(rel)))
		if err != nil {
			return fmt.Errorf("COPY %s: %w (run make build-windows first)", c.src, err)
		}
		dest, err := destination(c.src, c.dest)
		if err != nil {
			return err
		}
		files = append(files, wcow.File{Path: dest, Data: data})
		dests = append(dests, dest)
	}
	layer, err := wcow.BaseLayer(files, created)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	desc, err := wcow.WriteLayout(&buf, wcow.Image{
		Name:       name,
		Created:    created,
		Entrypoint: st.entrypoint,
		User:       st.user,
		Labels:     st.labels,
		Layer:      layer,
		CreatedBy: fmt.Sprintf("hack/image/winimage: %s stage %s onto a base layer of the HostProcess base image's registry hives: %s",
			filepath.Base(dockerfile), target, strings.Join(dests, ", ")),
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out+".tmp", buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return err
	}
	fmt.Printf("%s: %s, manifest %s, %d bytes\n", out, name, desc.Digest, buf.Len())
	return nil
}
