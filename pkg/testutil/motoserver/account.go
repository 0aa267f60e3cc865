package motoserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/diskplane/diskplane/pkg/cloud/sdkhttp"
)

// Account is one AWS account of a moto server: its own volumes, snapshots,
// instances and keys. Every request made through its clients names the
// account and is counted, by action and outcome, as ec2-emulator counts the
// requests it answers.
type Account struct {
	// ID is the 12-digit account ID, which moto writes into ARNs.
	ID  string
	srv *Server

	mu     sync.Mutex
	counts map[callKey]int
}

type callKey struct{ action, code string }

// NewAccount returns a fresh account of s for one test.
func (s *Server) NewAccount(t testing.TB) *Account {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(9e11))
	if err != nil {
		t.Fatal(err)
	}
	return &Account{ID: fmt.Sprintf("%012d", n.Int64()+1e11), srv: s, counts: map[callKey]int{}}
}

// DefaultAccount is moto's default account on s, the one a process
// reaching s through Environ uses; its requests made here are counted too.
func (s *Server) DefaultAccount() *Account {
	return &Account{ID: DefaultAccountID, srv: s, counts: map[callKey]int{}}
}

// httpClient sends requests to the account: moto's account header added,
// each request counted, bodies sent as the cloud layer sends them.
func (a *Account) httpClient() *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{Transport: &accountTransport{account: a, base: sdkhttp.Transport(base)}}
}

// AWSConfig is an SDK configuration for the account's EC2, STS and KMS,
// signing with this access key (moto checks no signature), or, with an
// empty accessKeyID, carrying no credentials: the same contract as
// ec2-emulator's test environment, so a test can take either.
func (a *Account) AWSConfig(accessKeyID, secretAccessKey string) aws.Config {
	cfg := aws.Config{Region: Region, BaseEndpoint: aws.String(a.srv.URL), HTTPClient: a.httpClient()}
	if accessKeyID != "" {
		cfg.Credentials = credentials.NewStaticCredentialsProvider(accessKeyID, secretAccessKey, "")
	}
	return cfg
}

// Region is the region the account's clients use.
func (a *Account) Region() string { return Region }

// EC2Client is a raw SDK client on the account, for setting state up
// behind the code under test's back; optFns adjust its options.
func (a *Account) EC2Client(optFns ...func(*ec2.Options)) *ec2.Client {
	return ec2.NewFromConfig(a.AWSConfig("AKIDMOTO", "moto-secret"), optFns...)
}

// Calls is how many requests of action went to the account through its
// clients (whatever their outcome).
func (a *Account) Calls(action string) int { return a.CallsWithCode(action, "") }

// CallsWithCode counts the requests of action answered with code
// ("Success", or an AWS error code); an empty code counts every outcome.
func (a *Account) CallsWithCode(action, code string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for k, v := range a.counts {
		if k.action == action && (code == "" || k.code == code) {
			n += v
		}
	}
	return n
}

// Image is the image instances are started from: Amazon Linux 2 (x86_64,
// root device /dev/xvda) from moto's stock list. Looking one up instead
// costs seconds per account, as moto loads its image catalogue for each.
const Image = "ami-04681a1dbd79675a5"

// RunInstance starts an instance of instanceType in zone and returns its
// ID; moto gives it a root volume, as EC2 does for an EBS-backed image.
func (a *Account) RunInstance(ctx context.Context, zone, instanceType string) (string, error) {
	out, err := a.EC2Client().RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(Image), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		InstanceType: types.InstanceType(instanceType),
		Placement:    &types.Placement{AvailabilityZone: aws.String(zone)},
	})
	if err != nil {
		return "", fmt.Errorf("RunInstances in %s: %w", zone, err)
	}
	return aws.ToString(out.Instances[0].InstanceId), nil
}

// CreateKey creates a symmetric KMS key with an alias ("alias/…") and
// returns its ARN.
func (a *Account) CreateKey(ctx context.Context, alias string) (string, error) {
	client := kms.NewFromConfig(a.AWSConfig("AKIDMOTO", "moto-secret"))
	out, err := client.CreateKey(ctx, &kms.CreateKeyInput{})
	if err != nil {
		return "", fmt.Errorf("CreateKey: %w", err)
	}
	if _, err := client.CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String(alias), TargetKeyId: out.KeyMetadata.KeyId}); err != nil {
		return "", fmt.Errorf("CreateAlias %s: %w", alias, err)
	}
	return aws.ToString(out.KeyMetadata.Arn), nil
}

// accountTransport names the account on each request and counts it.
type accountTransport struct {
	account *Account
	base    http.RoundTripper
}

func (t *accountTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	action, r, err := requestAction(r)
	if err != nil {
		return nil, err
	}
	if t.account.ID != DefaultAccountID {
		r = r.Clone(r.Context())
		r.Header.Set("x-moto-account-id", t.account.ID)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	code := "Success"
	if resp.StatusCode >= 300 {
		body, readErr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if readErr != nil {
			return nil, readErr
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		code = errorCode(body)
	}
	t.account.mu.Lock()
	t.account.counts[callKey{action, code}]++
	t.account.mu.Unlock()
	return resp, nil
}

// requestAction names a request's action: the Action field of a query
// request (EC2, STS) or the operation of a JSON one (KMS's X-Amz-Target,
// "TrentService.Decrypt"). It reads the body and puts it back.
func requestAction(r *http.Request) (string, *http.Request, error) {
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		return target[strings.LastIndex(target, ".")+1:], r, nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		return r.URL.Query().Get("Action"), r, nil
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return "", nil, err
	}
	shallow := *r
	shallow.Body = io.NopCloser(bytes.NewReader(body))
	shallow.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return "", &shallow, nil
	}
	return form.Get("Action"), &shallow, nil
}

// errorCode is the AWS error code of an error response: <Code> in XML
// (EC2, STS), __type in JSON (KMS).
func errorCode(body []byte) string {
	var doc struct {
		Codes []string `xml:"Errors>Error>Code"`
		Code  string   `xml:"Error>Code"`
	}
	if xml.Unmarshal(body, &doc) == nil {
		if len(doc.Codes) > 0 {
			return doc.Codes[0]
		}
		if doc.Code != "" {
			return doc.Code
		}
	}
	var js struct {
		Type string `json:"__type"`
	}
	if json.Unmarshal(body, &js) == nil && js.Type != "" {
		return js.Type[strings.LastIndex(js.Type, "#")+1:]
	}
	return "Unknown"
}
