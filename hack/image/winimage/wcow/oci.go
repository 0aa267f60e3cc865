package wcow

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// OCI image media types, layout file names and the annotations that name an
// image in a layout.
const (
	MediaTypeIndex     = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest  = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig    = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	// LayoutFile marks an OCI image layout and names its version.
	LayoutFile    = "oci-layout"
	LayoutVersion = "1.0.0"
	IndexFile     = "index.json"
	BlobDir       = "blobs/sha256"
	// AnnotationImageName is the full image name, which containerd's import
	// names the image after.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the OCI reference name: the tag alone, as
	// containerd's export writes it and buildah and skopeo look it up.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Descriptor points to a blob of an OCI image.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Image is a windows/amd64 image of one base layer. It carries no
// os.version and its index entry no platform: a HostProcess container runs
// on any Windows version, and containerd matches an image without
// os.version on every Windows host.
type Image struct {
	// Name is the full image name with its tag, e.g.
	// ghcr.io/diskplane/diskplane-windows:v0.1.0-hostprocess.
	Name string
	// Created dates the image and its history entry.
	Created    time.Time
	Entrypoint []string
	User       string
	Labels     map[string]string
	// Layer is the layer, an uncompressed tar (BaseLayer).
	Layer []byte
	// CreatedBy says in the history how the layer was made.
	CreatedBy string
}

// The JSON documents of an image, fields in the order the specification
// lists them.
type (
	imageConfig struct {
		Created      string          `json:"created"`
		Architecture string          `json:"architecture"`
		OS           string          `json:"os"`
		Config       containerConfig `json:"config"`
		RootFS       rootFS          `json:"rootfs"`
		History      []history       `json:"history"`
	}
	containerConfig struct {
		User       string            `json:"User,omitempty"`
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	}
	rootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	history struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by,omitempty"`
	}
	manifest struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        Descriptor   `json:"config"`
		Layers        []Descriptor `json:"layers"`
	}
	index struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Manifests     []Descriptor `json:"manifests"`
	}
)

// digest is the OCI digest of b.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Tag is the tag of image name: what follows its last colon, when that
// colon is after its last slash (a registry's port is not a tag).
func Tag(name string) (string, error) {
	colon := strings.LastIndex(name, ":")
	if colon < 0 || colon < strings.LastIndex(name, "/") || colon == len(name)-1 || strings.Contains(name, "@") {
		return "", fmt.Errorf("image name %q has no tag", name)
	}
	return name[colon+1:], nil
}

// WriteLayout writes img to w as an OCI image layout in a tar archive (what
// `ctr images import`, `skopeo copy oci-archive:` and buildah read), its
// layer gzip-compressed, every entry dated img.Created: the same image gives
// the same bytes. It returns the descriptor of the image's manifest.
func WriteLayout(w io.Writer, img Image) (Descriptor, error) {
	tag, err := Tag(img.Name)
	if err != nil {
		return Descriptor{}, err
	}
	created := img.Created.UTC().Truncate(time.Second)

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz) // no name, no time: reproducible
	if _, err := zw.Write(img.Layer); err != nil {
		return Descriptor{}, err
	}
	if err := zw.Close(); err != nil {
		return Descriptor{}, err
	}
	layer := gz.Bytes()

	config, err := json.Marshal(imageConfig{
		Created:      created.Format(time.RFC3339),
		Architecture: "amd64",
		OS:           "windows",
		Config:       containerConfig{User: img.User, Entrypoint: img.Entrypoint, Labels: img.Labels},
		RootFS:       rootFS{Type: "layers", DiffIDs: []string{digest(img.Layer)}},
		History:      []history{{Created: created.Format(time.RFC3339), CreatedBy: img.CreatedBy}},
	})
	if err != nil {
		return Descriptor{}, err
	}
	mf, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        Descriptor{MediaType: MediaTypeConfig, Digest: digest(config), Size: int64(len(config))},
		Layers:        []Descriptor{{MediaType: MediaTypeLayerGzip, Digest: digest(layer), Size: int64(len(layer))}},
	})
	if err != nil {
		return Descriptor{}, err
	}
	mfDesc := Descriptor{MediaType: MediaTypeManifest, Digest: digest(mf), Size: int64(len(mf))}
	named := mfDesc
	named.Annotations = map[string]string{AnnotationImageName: img.Name, AnnotationRefName: tag}
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{named}})
	if err != nil {
		return Descriptor{}, err
	}
	layout, err := json.Marshal(map[string]string{"imageLayoutVersion": LayoutVersion})
	if err != nil {
		return Descriptor{}, err
	}

	tw := tar.NewWriter(w)
	file := func(name string, data []byte) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: created}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: created})
	}
	blob := func(data []byte) error {
		return file(BlobDir+"/"+strings.TrimPrefix(digest(data), "sha256:"), data)
	}
	for _, step := range []func() error{
		func() error { return file(LayoutFile, layout) },
		func() error { return dir("blobs") },
		func() error { return dir(BlobDir) },
		func() error { return blob(layer) },
		func() error { return blob(config) },
		func() error { return blob(mf) },
		func() error { return file(IndexFile, idx) },
		tw.Close,
	} {
		if err := step(); err != nil {
			return Descriptor{}, err
		}
	}
	return mfDesc, nil
}
