// test_ops_torch: the ops of every device (test_backends.h) against the
// transformers Qwen3 code itself (and torch autograd for gradients) on small
// inputs. Both sides build the inputs from gen() below; the expected outputs
// are exact float32 hex values printed by the script at the end of this file
// (torch 2.x CPU, transformers 5.x).
// Bounds: RoPE table within 2^-23 absolute (torch's vectorised cos/sin are
// within 1 ulp, glibc's cosf/sinf are correctly rounded; the angles match
// exactly for hd 64); everything else normwise 2e-6 (float32 both sides,
// different summation orders); a GPU device 1e-5, 1e-4 for attention and the
// classifier (dev_tol).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "test_backends.h"
#include "test_ops_util.h"


// Same expression, in double, as gen() in the script.
static float *gen(int n, int a, int m, double scale) {
    float *x = xmalloc((size_t)n * sizeof(float), "gen");
    for (int i = 0; i < n; i++) x[i] = (float)((((i * a + 7) % m) / (0.5 * m) - 1.0) * scale);
    return x;
}

static double rel_vs(const float *got, const float *want, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)got[i] - want[i]));
        mag = fmax(mag, fabs((double)want[i]));
    }
    return diff / mag;
}

static double rel_vs_d(const double *got, const float *want, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs(got[i] - want[i]));
        mag = fmax(mag, fabs((double)want[i]));
    }
    return diff / mag;
}

// who: the device (NULL for the double reference).
static void check(const TestDevice *who, const char *what, double err, double tol) {
    const char *name = who ? who->name : "reference";
    if (who) tol = dev_tol(who, tol, strstr(what, "attention") || strstr(what, "classifier") ? 1e-4 : 1e-5);
    printf("  %-26s %-36s rel err %.2e (bound %.0e)\n", name, what, err, tol);
    if (!(err <= tol)) fail_msg("%s: %s: rel err %.3g > %.3g", name, what, err, tol);
}

static const float torch_rope_cos[96] = {
    0x1.14a282p-1f, 0x1.97c954p-1f, 0x1.d3258cp-1f, 0x1.ecec2p-1f, 0x1.f7ed06p-1f, 0x1.fc9708p-1f,
    0x1.fe8fa2p-1f, 0x1.ff649ep-1f, 0x1.ffbe78p-1f, 0x1.ffe45ep-1f, 0x1.fff458p-1f, 0x1.fffb16p-1f,
    0x1.fffdeep-1f, 0x1.ffff2p-1f, 0x1.ffffa2p-1f, 0x1.ffffd8p-1f, 0x1.fffffp-1f, 0x1.fffffap-1f,
    0x1.fffffep-1f, 0x1.fffffep-1f, 0x1p+0f, 0x1p+0f, 0x1p+0f, 0x1p+0f, 0x1p+0f, 0x1p+0f, 0x1p+0f, 0x1p+0f,
    0x1p+0f, 0x1p+0f, 0x1p+0f, 0x1p+0f, 0x1.1ff026p-1f, -0x1.32e68p-1f, 0x1.7fe166p-1f, -0x1.bb7374p-1f,
    -0x1.49d716p-2f, -0x1.72dc2ep-1f, 0x1.d5cf2cp-1f, 0x1.0f196cp-9f, 0x1.f515dcp-1f, -0x1.d597cep-4f,
    0x1.6ffb66p-1f, -0x1.714ccap-1f, 0x1.948c2ap-1f, -0x1.beced8p-1f, -0x1.6f7e06p-1f, 0x1.f9b0cp-6f,
    0x1.14a282p-1f, 0x1.97c954p-1f, 0x1.d3258ep-1f, 0x1.ecec22p-1f, 0x1.f7ed06p-1f, 0x1.fc9708p-1f,
    0x1.fe8fa2p-1f, 0x1.ff649ep-1f, 0x1.ffbe78p-1f, 0x1.ffe45ep-1f, 0x1.fff458p-1f, 0x1.fffb16p-1f,
    0x1.fffdeep-1f, 0x1.ffff2p-1f, 0x1.ffffa2p-1f, 0x1.ffffd8p-1f, 0x1.de1a4ep-2f, 0x1.11e314p-2f,
    0x1.f4e05p-1f, 0x1.61b354p-1f, 0x1.04fc8p-3f, 0x1.9e955cp-3f, 0x1.1a921ep-1f, -0x1.e283fap-1f,
    0x1.3dc2e6p-1f, 0x1.5467aep-1f, 0x1.cf396cp-1f, -0x1.e7a5c4p-1f, -0x1.179876p-1f, 0x1.5b4bbp-2f,
    -0x1.eec164p-1f, 0x1.f114c8p-1f, -0x1.fc6beap-1f, 0x1.af616cp-4f, -0x1.a9892ap-8f, 0x1.c05e8ep-3f,
    0x1.146ebap-1f, 0x1.1e6a5p-6f, -0x1.febe14p-1f, -0x1.a5128ep-2f, 0x1.169d76p-2f, 0x1.5551f2p-1f,
    0x1.b581d2p-1f, 0x1.e0214ep-1f, 0x1.f27a8ep-1f, 0x1.fa4894p-1f, 0x1.fd9636p-1f, 0x1.fefb5cp-1f,
};
static const float torch_rope_sin[96] = {
    0x1.aed548p-1f, 0x1.359a74p-1f, 0x1.a321e2p-2f, 0x1.14ec3p-2f, 0x1.6a4674p-3f, 0x1.d7f2bap-4f,
    0x1.32de6cp-4f, 0x1.8ec422p-5f, 0x1.0302b8p-5f, 0x1.506d08p-6f, 0x1.b4f494p-7f, 0x1.1bc172p-7f,
    0x1.7088b8p-8f, 0x1.dea3d6p-9f, 0x1.36d206p-9f, 0x1.93aeaep-10f, 0x1.0624dcp-10f, 0x1.547686p-11f,
    0x1.ba2e4ap-12f, 0x1.1f24e4p-12f, 0x1.74eea6p-13f, 0x1.e459c4p-14f, 0x1.3a8748p-14f, 0x1.987f7cp-15f,
    0x1.094564p-15f, 0x1.58863ap-16f, 0x1.bf749ep-17f, 0x1.2291c6p-17f, 0x1.796182p-18f, 0x1.ea20ep-19f,
    0x1.3e47c8p-19f, 0x1.9d5ef2p-20f, 0x1.a75cc2p-1f, 0x1.99d314p-1f, 0x1.52caaap-1f, -0x1.ffd736p-2f,
    0x1.e4b62ep-1f, 0x1.60ff34p-1f, -0x1.970dd4p-2f, -0x1.ffffb8p-1f, 0x1.a49dfap-3f, 0x1.fc9fcp-1f,
    0x1.63ffp-1f, 0x1.62a0f4p-1f, -0x1.39d2dep-1f, -0x1.f406cap-2f, 0x1.64806cp-1f, 0x1.ffc18ep-1f,
    0x1.aed548p-1f, 0x1.359a74p-1f, 0x1.a321ep-2f, 0x1.14ec2ep-2f, 0x1.6a4674p-3f, 0x1.d7f2b8p-4f,
    0x1.32de6ep-4f, 0x1.8ec424p-5f, 0x1.0302b6p-5f, 0x1.506d06p-6f, 0x1.b4f492p-7f, 0x1.1bc174p-7f,
    0x1.7088b8p-8f, 0x1.dea3d4p-9f, 0x1.36d206p-9f, 0x1.93aeaep-10f, -0x1.c4c47ep-1f, 0x1.ed58ap-1f,
    -0x1.a895aep-3f, 0x1.723068p-1f, 0x1.fbd35ep-1f, -0x1.f5664ap-1f, -0x1.aaf6a2p-1f, 0x1.567a4cp-2f,
    0x1.917646p-1f, -0x1.7e7358p-1f, -0x1.b432c6p-2f, 0x1.380cf8p-2f, -0x1.aceaeap-1f, -0x1.e1a762p-1f,
    0x1.0785dcp-2f, 0x1.eac8b2p-3f, -0x1.e36c5p-4f, 0x1.fd271p-1f, -0x1.fffd3cp-1f, -0x1.f39442p-1f,
    0x1.aef684p-1f, -0x1.ffebf8p-1f, 0x1.1ee5f8p-4f, 0x1.d2b5d6p-1f, 0x1.ecaf14p-1f, 0x1.7da254p-1f,
    0x1.09f438p-1f, 0x1.63a29cp-2f, 0x1.d38e06p-3f, 0x1.312e92p-3f, 0x1.8d372ep-4f, 0x1.022de2p-4f,
};
static const float torch_rope_apply[48] = {
    -0x1.b9079ap+0f, -0x1.079a9ep-2f, 0x1.353a4cp+0f, -0x1.53a4cp+0f, 0x1.1be196p-3f, 0x1.9a9d26p+0f,
    -0x1.dc83cep-1f, 0x1.11be1ap-1f, -0x1p+1f, -0x1.11be1ap-1f, 0x1.dc83cep-1f, -0x1.9a9d26p+0f,
    -0x1.1be196p-3f, 0x1.53a4cp+0f, -0x1.353a4cp+0f, 0x1.079a9ep-2f, -0x1.a597d6p+0f, -0x1.15f5p+0f,
    0x1.653b7p-1f, -0x1.e1911ap+0f, 0x1.4f41a4p-1f, 0x1.868108p-1f, -0x1.770254p+0f, -0x1.a0e5fp-6f,
    -0x1.555156p+0f, -0x1.44c8dp+0f, 0x1.b739ep-2f, 0x1.d7abecp+0f, 0x1.c7befp-1f, 0x1.a9e9ccp-2f,
    -0x1.c01384p+0f, -0x1.2a7fecp-2f, 0x1.84ad44p+0f, -0x1.5d2beep+0f, -0x1.3a262p-5f, 0x1.917e98p+0f,
    0x1.2766p-5f, -0x1.00cf8ap-1f, 0x1.f667b8p+0f, -0x1.2067fp-1f, 0x1.7dcc76p+0f, -0x1.65bb7cp+0f,
    -0x1.2e996p-2f, 0x1.4b05dp+0f, -0x1.6b9998p-2f, -0x1.c8d044p-1f, 0x1.aaa51p+0f, -0x1.af563p-1f,
};
static const float torch_rms_out[30] = {
    0x1.39f2aep+0f, -0x1.908026p-3f, -0x1.8c7edep-1f, -0x1.43f5ep-4f, -0x1.f4a03p-1f, -0x1.fd14acp-4f,
    0x1.d9ecfcp-1f, 0x1.2fb682p+0f, -0x1.f26692p-6f, -0x1.5fc5e4p+0f, 0x1.420314p+0f, -0x1.b13648p-3f,
    -0x1.750b2ep-1f, -0x1.3d550ep-4f, -0x1.05d7fep+0f, -0x1.af6de4p-4f, 0x1.cd4a64p-1f, 0x1.398b3cp+0f,
    -0x1.40e5d6p-5f, -0x1.5280acp+0f, 0x1.49ac98p+0f, -0x1.d16c22p-3f, -0x1.5d1118p-1f, -0x1.364816p-4f,
    -0x1.110e86p+0f, -0x1.61143cp-4f, 0x1.c00934p-1f, 0x1.42fcbp+0f, -0x1.884f5ep-5f, -0x1.44c534p+0f,
};
static const float torch_rms_dx[30] = {
    0x1.14d5a6p-2f, -0x1.8bd0ccp-5f, -0x1.8813cp-2f, 0x1.ca071ap-4f, -0x1.4e7d14p-3f, -0x1.1094ap-3f,
    -0x1.37a8ecp-2f, 0x1.4c73c4p-4f, 0x1.8ffc3ep-5f, 0x1.c6c08ap-1f, 0x1.043068p-4f, 0x1.af8a78p-5f,
    -0x1.659bfcp-1f, 0x1.af75fap-4f, 0x1.f73648p-4f, -0x1.0d3964p-2f, -0x1.024e1cp-3f, -0x1.5ec426p-3f,
    0x1.aca7eep-4f, 0x1.0efcccp-1f, 0x1.8570a8p-7f, 0x1.a4c868p-3f, 0x1.d12ec2p-2f, -0x1.d7975p-5f,
    0x1.fcd7bap-2f, 0x1.aeaf0ep-3f, -0x1.15d2c8p-4f, -0x1.33c8bap-2f, -0x1.a07e3ap-4f, 0x1.59ee94p-4f,
};
static const float torch_rms_dw[10] = {
    0x1.7099cap+0f, -0x1.fd60eep-2f, 0x1.1276b2p-1f, -0x1.ee57bcp+0f, -0x1.4e0a4p-1f, 0x1.616df8p-3f,
    -0x1.c8e344p+0f, -0x1.4a01b2p-1f, -0x1.cbac6p-6f, -0x1.79bda4p+0f,
};
static const float torch_attn_causal_out[96] = {
    -0x1.bd0264p-1f, -0x1.0bf66ep-4f, 0x1.7a04c8p-1f, -0x1.d4ef4p-2f, -0x1.bd0264p-1f, -0x1.0bf66ep-4f,
    0x1.7a04c8p-1f, -0x1.d4ef4p-2f, 0x1.6217ecp-2f, -0x1.b37072p-1f, -0x1.7ecdc2p-5f, 0x1.8396bap-1f,
    0x1.6217ecp-2f, -0x1.b37072p-1f, -0x1.7ecdc2p-5f, 0x1.8396bap-1f, -0x1.924b2ap-1f, 0x1.270d7p-6f,
    0x1.bc06e4p-2f, -0x1.7f80cep-2f, -0x1.dee026p-2f, 0x1.58270cp-2f, -0x1.74c3b6p-1f, -0x1.ce54d8p-5f,
    0x1.7cf5bp-2f, -0x1.a6019p-1f, -0x1.4fbf4p-6f, 0x1.528754p-1f, 0x1.179a68p-1f, -0x1.4ce2p-1f,
    0x1.3a865cp-3f, 0x1.a11d4p-6f, -0x1.406b84p-2f, 0x1.f69baap-2f, -0x1.2a1ad8p-2f, 0x1.92a814p-4f,
    -0x1.a7423p-1f, -0x1.77d35ap-6f, 0x1.4fdb5cp-1f, -0x1.a96edap-2f, 0x1.731e16p-2f, -0x1.9b72dcp-1f,
    0x1.0bc68p-13f, 0x1.3b7314p-1f, -0x1.4d0e6p-1f, -0x1.3cb88cp-5f, 0x1.87b81p-1f, -0x1.99568ep-2f,
    0x1.6cb2p-2f, -0x1.5d6d4p-1f, 0x1.92bep-13f, 0x1.88e3c6p-1f, -0x1.a244e4p-1f, -0x1.5ea69ep-5f,
    0x1.4c7baap-1f, -0x1.9f743ep-2f, -0x1.cdf16cp-3f, 0x1.6a61d2p-3f, -0x1.dd6dcp-2f, 0x1.9cf38ap-5f,
    -0x1.598b3ap-1f, -0x1.d396a8p-8f, 0x1.709884p-1f, -0x1.87748p-2f, -0x1.4af3e6p-3f, 0x1.0c13eep-1f,
    -0x1.f2efa4p-2f, 0x1.a55048p-3f, 0x1.903218p-1f, -0x1.5ac9dp-2f, 0x1.c329c8p-2f, -0x1.5aa2cap-1f,
    -0x1.166394p-3f, 0x1.193b4cp-1f, -0x1.d360fp-2f, 0x1.d186ep-3f, 0x1.6bad48p-1f, -0x1.9f671ap-2f,
    0x1.7e1f66p-2f, -0x1.80a81ep-1f, -0x1.fe4ap-3f, 0x1.c1b07p-2f, -0x1.123436p-1f, 0x1.c7a342p-4f,
    0x1.10372ap-2f, -0x1.2690d6p-1f, 0x1.158c88p-3f, 0x1.253614p-1f, -0x1.31707p-3f, 0x1.7caa6ap-2f,
    -0x1.e549ccp-2f, 0x1.d3a0cp-3f, 0x1.64425p-2f, -0x1.7b57f4p-1f, -0x1.654e9cp-6f, 0x1.412cc6p-1f,
};
static const float torch_attn_causal_dq[96] = {
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, -0x1.b4d38p-5f, -0x1.b4d386p-5f, 0x1.e2ced6p-3f,
    -0x1.b4d38p-5f, 0x1.0c96dp-9f, 0x1.0c97bap-9f, -0x1.28dd78p-7f, 0x1.0c9744p-9f, -0x1.adec28p-7f,
    -0x1.adec68p-7f, -0x1.adec3cp-7f, 0x1.db2d8cp-5f, -0x1.5ea87cp-5f, -0x1.5ea876p-5f, -0x1.5ea87ap-5f,
    0x1.8391cap-3f, -0x1.4e84cep-4f, -0x1.4e84ccp-4f, 0x1.92f2f4p-3f, -0x1.4e84cep-4f, 0x1.d817bp-9f,
    0x1.d815acp-9f, -0x1.40c40ap-7f, 0x1.d816b4p-9f, -0x1.13d592p-6f, -0x1.ce7dc8p-7f, -0x1.ce7d8ap-7f,
    0x1.0abbf4p-4f, -0x1.d55dfcp-3f, 0x1.0c04b6p-4f, 0x1.0c04c4p-4f, 0x1.5d42p-8f, 0x1.1e046p-6f,
    -0x1.d5363ap-5f, 0x1.b5b788p-6f, 0x1.1e046p-6f, 0x1.40da5ap-5f, 0x1.07ea54p-5f, -0x1.8feefap-4f,
    0x1.40da5ep-5f, -0x1.c12382p-3f, 0x1.ebacfap-3f, -0x1.5f32a2p-2f, -0x1.36b56cp-6f, 0x1.f768dp-4f,
    -0x1.6d9c38p-5f, 0x1.dc7c8cp-6f, -0x1.67e682p-5f, 0x1.f8b95ap-5f, -0x1.5dfdd8p-4f, 0x1.584b66p-5f,
    0x1.a95592p-5f, -0x1.58767p-5f, 0x1.7d824p-6f, -0x1.1c484p-6f, 0x1.b4a158p-5f, -0x1.115aa6p-5f,
    -0x1.d3dd8cp-6f, 0x1.864dd6p-4f, -0x1.6112c8p-5f, 0x1.99c2a6p-4f, -0x1.b0a0b8p-6f, 0x1.c9ad14p-6f,
    -0x1.6a4078p-4f, 0x1.4a516ep-7f, 0x1.3f3dp-3f, -0x1.364166p-4f, 0x1.c771fp-4f, -0x1.21ca0cp-5f,
    0x1.29b588p-4f, -0x1.0b80f2p-5f, 0x1.068d08p-6f, -0x1.2a0d8p-4f, -0x1.274f38p-4f, 0x1.bc1dd2p-5f,
    -0x1.4a71ccp-4f, 0x1.eff86ap-5f, -0x1.1cb7eep-5f, 0x1.feafa6p-5f, -0x1.04aa98p-3f,
};
static const float torch_attn_causal_dk[48] = {
    0x1.25cd04p-2f, -0x1.8c8f3ep-3f, 0x1.7cfd22p-5f, 0x1.add8bp-8f, -0x1.8cee38p-5f, -0x1.5fe8d2p-4f,
    -0x1.3d47ep-4f, 0x1.305cc8p-9f, -0x1.3b009p-3f, 0x1.ca6a34p-7f, 0x1.4ee592p-4f, 0x1.dbf848p-5f,
    0x1.a98bfcp-4f, -0x1.b6da46p-3f, 0x1.b02aecp-4f, -0x1.c395dap-4f, -0x1.807cd4p-4f, 0x1.3a122p-3f,
    -0x1.ec2f56p-4f, -0x1.4f115ep-4f, -0x1.ebda1ep-4f, 0x1.6dcd9ap-5f, 0x1.41ed2p-7f, -0x1.63dca4p-6f,
    0x1.772c86p-7f, 0x1.1e523p-6f, -0x1.598bd8p-6f, -0x1.02211p-8f, 0x1.b27aeep-5f, 0x1.18c7aep-2f,
    -0x1.243f54p-3f, 0x1.068086p-3f, -0x1.d90552p-5f, 0x1.370704p-6f, 0x1.c318p-12f, 0x1.0725cap-6f,
    0x1.c8958p-10f, -0x1.7c7828p-7f, 0x1.244596p-4f, 0x1.7420cp-12f, 0x1.ce714ep-8f, -0x1.4d4af6p-7f,
    0x1.9b57c8p-7f, 0x1.4904ecp-8f, 0x1.432b92p-7f, -0x1.cd92eep-8f, 0x1.1230ecp-5f, 0x1.253b1p-10f,
};
static const float torch_attn_causal_dv[48] = {
    0x1.8f613cp-1f, -0x1.f7802cp-1f, 0x1.625ddcp+0f, -0x1.385846p-2f, -0x1.1b7468p+0f, 0x1.d9aedep+0f,
    -0x1.3c1ab2p+1f, 0x1.6548a4p-2f, 0x1.e1192p-1f, -0x1.4d27a8p-1f, 0x1.118d98p-2f, 0x1.556d88p+0f,
    0x1.76ce0ep-3f, -0x1.5bbff4p-2f, -0x1.5ed6d2p-4f, -0x1.b36ca6p-1f, 0x1.29ce5p-1f, -0x1.474f04p-2f,
    0x1.535358p-3f, 0x1.a8bb76p-2f, -0x1.2aae8cp-3f, -0x1.2776f2p-2f, 0x1.409072p+0f, -0x1.ad3f82p-1f,
    0x1.453c64p-3f, -0x1.a07accp-3f, -0x1.5984fep-2f, -0x1.3ff758p-1f, -0x1.4bffd4p+0f, 0x1.33777p-3f,
    0x1.18df14p-2f, -0x1.67b586p-2f, -0x1.d09b9p-3f, 0x1.3e22dcp-1f, -0x1.05ed72p-1f, 0x1.85ac0ep-2f,
    -0x1.264bc4p-1f, -0x1.966e9cp-7f, 0x1.396b8ap-1f, -0x1.b19eaap-3f, -0x1.97ef6ap-5f, 0x1.15df5cp-4f,
    -0x1.65bf12p-4f, 0x1.f06p-6f, -0x1.5f596p-4f, -0x1.3df0d4p-5f, 0x1.617ee2p-4f, -0x1.4285fap-4f,
};
static const float torch_attn_seg_out[96] = {
    -0x1.bd0264p-1f, -0x1.0bf66ep-4f, 0x1.7a04c8p-1f, -0x1.d4ef4p-2f, -0x1.bd0264p-1f, -0x1.0bf66ep-4f,
    0x1.7a04c8p-1f, -0x1.d4ef4p-2f, 0x1.6217ecp-2f, -0x1.b37072p-1f, -0x1.7ecdc2p-5f, 0x1.8396bap-1f,
    0x1.6217ecp-2f, -0x1.b37072p-1f, -0x1.7ecdc2p-5f, 0x1.8396bap-1f, -0x1.924b2ap-1f, 0x1.270d7p-6f,
    0x1.bc06e4p-2f, -0x1.7f80cep-2f, -0x1.dee026p-2f, 0x1.58270cp-2f, -0x1.74c3b6p-1f, -0x1.ce54d8p-5f,
    0x1.7cf5bp-2f, -0x1.a6019p-1f, -0x1.4fbf4p-6f, 0x1.528754p-1f, 0x1.179a68p-1f, -0x1.4ce2p-1f,
    0x1.3a865cp-3f, 0x1.a11d4p-6f, -0x1.323e34p-7f, 0x1.96ba9ep-1f, -0x1.9b8396p-2f, 0x1.9b8396p-2f,
    -0x1.323e34p-7f, 0x1.96ba9ep-1f, -0x1.9b8396p-2f, 0x1.9b8396p-2f, -0x1.96ba9ep-1f, 0x1.323e34p-7f,
    0x1.a04c9p-1f, -0x1.885fb4p-2f, -0x1.96ba9ep-1f, 0x1.323e34p-7f, 0x1.a04c9p-1f, -0x1.885fb4p-2f,
    0x1.a28724p-2f, -0x1.7703e2p-1f, 0x1.0957d4p-6f, 0x1.a3ce58p-1f, 0x1.55f93p-3f, 0x1.3410fcp-3f,
    -0x1.cdea1ap-3f, 0x1.28091p-1f, -0x1.9f0b4p-2f, 0x1.97fbfp-2f, -0x1.373d58p-1f, 0x1.82929p-8f,
    -0x1.8dac4cp-1f, 0x1.bae92p-6f, 0x1.7f39acp-1f, -0x1.764312p-2f, 0x1.91bd78p-5f, 0x1.4f21c8p-1f,
    -0x1.5fb9f4p-2f, 0x1.8c241p-2f, 0x1.aa429cp-1f, -0x1.666042p-2f, 0x1.c29392p-2f, -0x1.5f886ep-1f,
    -0x1.6afd54p-3f, 0x1.40c44p-1f, -0x1.f90848p-2f, 0x1.df2dbcp-3f, -0x1.34491ep-1f, 0x1.9ce9d8p-3f,
    0x1.8a35eep-2f, -0x1.86f974p-3f, 0x1.863bap-5f, 0x1.2820ap-1f, -0x1.11c6dcp-2f, 0x1.5acd4cp-2f,
    0x1.27db62p-2f, -0x1.307b72p-1f, 0x1.241d16p-3f, 0x1.2fa718p-1f, -0x1.660f96p-3f, 0x1.a2edp-2f,
    -0x1.fd0d2ap-2f, 0x1.e41b7cp-3f, 0x1.02ef3cp-4f, 0x1.96d24p-6f, -0x1.563432p-4f, 0x1.e5d156p-2f,
};
static const float torch_attn_seg_dq[96] = {
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, -0x1.b4d38p-5f, -0x1.b4d386p-5f, 0x1.e2ced6p-3f,
    -0x1.b4d38p-5f, 0x1.0c96dp-9f, 0x1.0c97bap-9f, -0x1.28dd78p-7f, 0x1.0c9744p-9f, -0x1.adec28p-7f,
    -0x1.adec68p-7f, -0x1.adec3cp-7f, 0x1.db2d8cp-5f, -0x1.5ea87cp-5f, -0x1.5ea876p-5f, -0x1.5ea87ap-5f,
    0x1.8391cap-3f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x1.27edacp-7f, -0x1.471428p-5f, 0x1.27eda8p-7f,
    0x1.27edbp-7f, -0x1.bb2acp-4f, 0x1.e9d0fp-2f, -0x1.bb2ac4p-4f, -0x1.bb2abep-4f, 0x1.3c3ea2p-5f,
    0x1.3c3e8ap-5f, -0x1.5d887ep-3f, 0x1.3c3e98p-5f, -0x1.b15d08p-7f, -0x1.b15d08p-7f, 0x1.defb0ap-5f,
    -0x1.b15d0cp-7f, 0x1.55f5d8p-5f, -0x1.6c95a8p-3f, 0x1.55f5dep-5f, 0x1.207954p-5f, -0x1.e27d78p-7f,
    0x1.29873ep-7f, -0x1.e27d72p-7f, 0x1.52461ep-5f, -0x1.22dbb2p-5f, -0x1.22dbbcp-5f, 0x1.9df298p-4f,
    -0x1.22dbb8p-5f, -0x1.a18b66p-4f, -0x1.a18b6cp-4f, 0x1.193c22p-2f, -0x1.a18b68p-4f, -0x1.3c6e02p-3f,
    0x1.2b5156p-2f, -0x1.3c6e04p-3f, 0x1.2322a8p-3f, -0x1.360b96p-6f, 0x1.b1dd08p-5f, -0x1.360b9ap-6f,
    0x1.b52f2cp-6f, -0x1.3a2762p-4f, -0x1.3a275ep-4f, 0x1.c1e9f4p-5f, -0x1.3a276p-4f, 0x1.235d38p-7f,
    0x1.235d2p-7f, 0x1.3c4d06p-3f, 0x1.235d3p-7f,
};
static const float torch_attn_seg_dk[48] = {
    0x1.01577ap-3f, -0x1.f885bep-5f, 0x1.a4a63p-5f, -0x1.164f5cp-3f, -0x1.db389p-7f, 0x1.a0bc3ep-6f,
    -0x1.875e46p-4f, 0x1.fc617cp-7f, -0x1.01577cp-3f, 0x1.f885cap-5f, -0x1.a4a64p-5f, 0x1.164f5ep-3f,
    0x1.db38cp-7f, -0x1.a0bc4ep-6f, 0x1.875e4ap-4f, -0x1.fc615p-7f, -0x1.03c19cp-2f, 0x1.e3bc48p-7f,
    0x1.a564a8p-4f, -0x1.89d11cp-3f, 0x1.c923eap-4f, -0x1.5f0a04p-3f, 0x1.208ecp-7f, -0x1.9a5072p-3f,
    0x1.098ed4p-2f, 0x1.0ca58p-5f, -0x1.9d9348p-3f, 0x1.72223cp-3f, -0x1.01bb84p-4f, 0x1.46ff4cp-3f,
    -0x1.8e0cacp-4f, 0x1.fae92ap-4f, -0x1.6f182cp-6f, -0x1.4dc5e8p-6f, 0x1.f4eap-5f, 0x1.5d857cp-9f,
    -0x1.15e8ccp-3f, 0x1.ef6f0ep-4f, 0x1.abfa04p-5f, -0x1.df8a9ep-6f, 0x1.1244c4p-6f, -0x1.bd6348p-6f,
    0x1.3699ccp-5f, 0x1.238cc2p-7f, 0x1.646924p-4f, -0x1.bf59a6p-4f, 0x1.27fbacp-5f, 0x1.b19a5ep-4f,
};
static const float torch_attn_seg_dv[48] = {
    0x1.e98764p-2f, -0x1.940e1p-1f, 0x1.b00668p+0f, -0x1.728fep+0f, -0x1.0bd19p+0f, 0x1.f2ed6cp+0f,
    -0x1.00432cp+1f, 0x1.fc7146p-1f, 0x1.0feedp-1f, -0x1.81152cp-1f, 0x1.c3e8fp-3f, 0x1.9c5114p-1f,
    -0x1.64b06p-2f, 0x1.b2a124p-4f, -0x1.f93426p-2f, -0x1.3edbfap-5f, 0x1.44dcfep+0f, -0x1.9dab4ep-1f,
    0x1.009168p-4f, 0x1.c997ap+0f, -0x1.119a7p-4f, -0x1.b27f5p-3f, 0x1.fdc2a6p-1f, -0x1.4bea04p+0f,
    0x1.6f2ab4p-3f, 0x1.045718p-3f, -0x1.dbc6bcp-2f, -0x1.915e66p-2f, -0x1.413d72p+0f, 0x1.ba52ap-7f,
    0x1.0b7cb2p-2f, -0x1.495646p-1f, -0x1.cdd3ep-3f, 0x1.537fa2p-1f, -0x1.10a634p-1f, 0x1.b7c5f8p-2f,
    -0x1.9a20a2p-2f, -0x1.ebe578p-3f, 0x1.7db2bep-1f, -0x1.1c0a2cp-1f, -0x1.8d046p-5f, 0x1.754edp-4f,
    -0x1.7d00cep-4f, 0x1.7da064p-5f, 0x1.6d1268p-4f, -0x1.2e2f76p-2f, 0x1.4d64a8p-3f, -0x1.c3d41ep-2f,
};
static const float torch_swiglu_out[9] = {
    0x1.01959p-3f, -0x1.3f55a4p-5f, -0x1.25f604p+0f, 0x1.ea606cp-1f, -0x1.074408p-5f, -0x1.03f30ap-2f,
    -0x1.fd943ep-7f, 0x1.42d958p-4f, 0x1.e7bf94p-1f,
};
static const float torch_swiglu_dgate[9] = {
    -0x1.6a0accp-5f, -0x1.7d7fdp-8f, 0x1.a3fe46p-2f, -0x1.1d3f7ap-6f, -0x1.8cc39cp-4f, -0x1.416454p-6f,
    -0x1.2a26e2p-8f, -0x1.b49676p-6f, 0x1.162ccap-3f,
};
static const float torch_swiglu_dup[9] = {
    0x1.07cbe2p-3f, -0x1.2074d6p-6f, -0x1.4181dep+1f, -0x1.01f802p-5f, 0x1.4bb4c2p-3f, 0x1.17a2aep-4f,
    -0x1.114e64p-3f, 0x1.87c982p-5f, 0x1.30144cp+0f,
};
static const double torch_ce_loss = 8.13083076;
static const float torch_ce_dh[30] = {
    -0x1.7bf67p-2f, -0x1.b07eaap-2f, -0x1.7bf66ep-2f, -0x1.b07eacp-2f, -0x1.9bd798p-3f, -0x1.939dacp-2f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x1.81522cp+0f, -0x1.dbaa38p-2f, 0x1.81523p+0f,
    -0x1.dbaa34p-2f, -0x1.e6e122p-2f, -0x1.7a7888p-2f, 0x1.8ee8fp-4f, 0x1.23a15p-3f, 0x1.8ee8f4p-4f,
    0x1.23a14ep-3f, 0x1.04bd74p-3f, 0x1.0393ccp-2f, -0x1.de27fp-3f, 0x1.418322p-1f, -0x1.de27eap-3f,
    0x1.418322p-1f, -0x1.4087ccp-4f, -0x1.1c0c2cp-1f,
};
static const float torch_ce_dW[42] = {
    -0x1.08d474p+0f, 0x1.ff8a38p-2f, -0x1.d44358p-1f, 0x1.b4602ep-1f, -0x1.96ddc6p-1f, 0x1.f1c5cp-1f,
    0x1.c27e94p-2f, -0x1.1d4c5cp-1f, 0x1.61e4b4p-2f, -0x1.f73aecp-2f, 0x1.014ad2p-2f, -0x1.2bea68p-1f,
    0x1.d3c47p-7f, 0x1.9b1cdap-1f, 0x1.591458p-4f, -0x1.cd66a6p-1f, 0x1.3bd80ep-3f, -0x1.a9932cp-1f,
    0x1.00058ep+0f, -0x1.181f7p-1f, 0x1.180084p+0f, 0x1.64c9bap-3f, 0x1.2ffb7ap+0f, 0x1.1250b6p-2f,
    -0x1.ac8f12p-1f, -0x1.860c8p-6f, -0x1.efd1c8p-1f, 0x1.1b1e36p-2f, -0x1.198a4p+0f, 0x1.293192p-3f,
    0x1.947b4ep-2f, -0x1.d9853cp-2f, 0x1.41c086p-2f, -0x1.68fba6p-2f, 0x1.de0b76p-3f, -0x1.bbb67p-2f,
    0x1.6c1b7cp-6f, 0x1.26f9b2p-2f, 0x1.71ef12p-5f, 0x1.c4c066p-2f, 0x1.16e832p-4f, 0x1.dc3c94p-2f,
};

static void test_torch_rope(void **state) {
    (void)state;
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        RopeTable rt;
        rope_table_init(&rt, dev, 40960, 64, 1e6f);
        const int pos[3] = {1, 1000, 40959};
        double worst = 0.0;
        int exact = 0;
        const size_t table_bytes = (size_t)40960 * 32 * sizeof(float);
        float *cos_t = xmalloc(table_bytes, "rope cos"), *sin_t = xmalloc(table_bytes, "rope sin");
        fetch(dev, cos_t, rt.cos, table_bytes);
        fetch(dev, sin_t, rt.sin, table_bytes);
        for (int p = 0; p < 3; p++)
            for (int i = 0; i < 32; i++) {
                float c = cos_t[(size_t)pos[p] * 32 + i], s = sin_t[(size_t)pos[p] * 32 + i];
                worst = fmax(worst, fmax(fabs(c - torch_rope_cos[p * 32 + i]), fabs(s - torch_rope_sin[p * 32 + i])));
                exact += (c == torch_rope_cos[p * 32 + i]) + (s == torch_rope_sin[p * 32 + i]);
            }
        printf("  %-26s rope table hd=64 theta=1e6: %d of 192 bit-equal, max abs diff %.1e\n", devs[d].name, exact,
               worst);
        if (!(worst <= 0x1p-23)) fail_msg("%s: rope table off by %.3g", devs[d].name, worst);
        rope_table_free(&rt, dev);
        free(cos_t);
        free(sin_t);

        rope_table_init(&rt, dev, 8, 8, 1e4f);
        const int pos2[3] = {0, 3, 7};
        float *x = gen(48, 37, 101, 2.0);
        Mirrors mr = mirrors_on(dev);
        float *x_d = mirror(&mr, x, 48 * sizeof(float));
        int *pos_d = mirror(&mr, pos2, sizeof pos2);
        OP(dev, rope_forward, x_d, &rt, pos_d, 3, 2, 8);
        fetch(dev, x, x_d, 48 * sizeof(float));
        mirrors_free(&mr);
        check(&devs[d], "rope applied hd=8, 2 heads", rel_vs(x, torch_rope_apply, 48), 2e-6);
        rope_table_free(&rt, dev);
        free(x);
    }
}

static void test_torch_rmsnorm(void **state) {
    (void)state;
    float *x = gen(30, 29, 97, 3.0), *w = gen(10, 13, 31, 1.5), *dout = gen(30, 17, 53, 1.0);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        float *out = zeros_f(30), *rstd = zeros_f(3), *dx = zeros_f(30), *dw = zeros_f(10);
        Mirrors mr = mirrors_on(dev);
        float *x_d = mirror(&mr, x, 30 * sizeof(float)), *w_d = mirror(&mr, w, 10 * sizeof(float));
        float *g_d = mirror(&mr, dout, 30 * sizeof(float)), *out_d = mirror(&mr, out, 30 * sizeof(float));
        float *rstd_d = mirror(&mr, rstd, 3 * sizeof(float)), *dx_d = mirror(&mr, dx, 30 * sizeof(float));
        float *dw_d = mirror(&mr, dw, 10 * sizeof(float));
        OP(dev, rmsnorm_forward, out_d, rstd_d, x_d, w_d, 3, 10, 1e-6f);
        OP(dev, rmsnorm_backward, dx_d, dw_d, g_d, x_d, w_d, rstd_d, 3, 10);
        fetch(dev, out, out_d, 30 * sizeof(float));
        fetch(dev, dx, dx_d, 30 * sizeof(float));
        fetch(dev, dw, dw_d, 10 * sizeof(float));
        mirrors_free(&mr);
        check(&devs[d], "rmsnorm out", rel_vs(out, torch_rms_out, 30), 2e-6);
        check(&devs[d], "rmsnorm dx", rel_vs(dx, torch_rms_dx, 30), 2e-6);
        check(&devs[d], "rmsnorm dw", rel_vs(dw, torch_rms_dw, 10), 2e-6);
        free(out); free(rstd); free(dx); free(dw);
    }
    free(x); free(w); free(dout);
}

static void attention_case(const char *name, const int *seg, const float *t_out, const float *t_dq,
                           const float *t_dk, const float *t_dv) {
    enum { T = 6, NQ = 4, NKV = 2, HD = 4, QE = T * NQ * HD, KE = T * NKV * HD };
    float *q = gen(QE, 37, 101, 2.0), *k = gen(KE, 41, 103, 2.0), *v = gen(KE, 43, 107, 1.0);
    float *dout = gen(QE, 47, 109, 1.0);
    char what[64];
    snprintf(what, sizeof what, "attention %s out,dq,dk,dv", name);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        float *out = zeros_f(QE), *lse = zeros_f(NQ * T), *dq = zeros_f(QE), *dk = zeros_f(KE), *dv = zeros_f(KE);
        const size_t qb = QE * sizeof(float), kb = KE * sizeof(float);
        Mirrors mr = mirrors_on(dev);
        float *q_d = mirror(&mr, q, qb), *k_d = mirror(&mr, k, kb), *v_d = mirror(&mr, v, kb);
        float *g_d = mirror(&mr, dout, qb), *out_d = mirror(&mr, out, qb), *lse_d = mirror(&mr, lse, NQ * T * 4);
        float *dq_d = mirror(&mr, dq, qb), *dk_d = mirror(&mr, dk, kb), *dv_d = mirror(&mr, dv, kb);
        int *seg_d = seg ? mirror(&mr, seg, T * sizeof(int)) : NULL;
        OP(dev, attention_forward, out_d, lse_d, q_d, k_d, v_d, seg_d, 1, T, NQ, NKV, HD);
        OP(dev, attention_backward, dq_d, dk_d, dv_d, g_d, out_d, lse_d, q_d, k_d, v_d, seg_d, 1, T, NQ, NKV, HD);
        fetch(dev, out, out_d, qb);
        fetch(dev, dq, dq_d, qb);
        fetch(dev, dk, dk_d, kb);
        fetch(dev, dv, dv_d, kb);
        mirrors_free(&mr);
        double e = fmax(fmax(rel_vs(out, t_out, QE), rel_vs(dq, t_dq, QE)),
                        fmax(rel_vs(dk, t_dk, KE), rel_vs(dv, t_dv, KE)));
        check(&devs[d], what, e, 2e-6);
        free(out); free(lse); free(dq); free(dk); free(dv);
    }
    // The double reference agrees with transformers too.
    double qd[QE], kd[KE], vd[KE], doutd[QE], outd[QE], dqd[QE] = {0}, dkd[KE] = {0}, dvd[KE] = {0};
    for (int i = 0; i < QE; i++) qd[i] = q[i], doutd[i] = dout[i];
    for (int i = 0; i < KE; i++) kd[i] = k[i], vd[i] = v[i];
    attention_forward_ref(outd, qd, kd, vd, seg, 1, T, NQ, NKV, HD);
    attention_backward_ref(dqd, dkd, dvd, doutd, qd, kd, vd, seg, 1, T, NQ, NKV, HD);
    double e = fmax(fmax(rel_vs_d(outd, t_out, QE), rel_vs_d(dqd, t_dq, QE)),
                    fmax(rel_vs_d(dkd, t_dk, KE), rel_vs_d(dvd, t_dv, KE)));
    check(NULL, what, e, 2e-6);
    free(q); free(k); free(v); free(dout);
}

static void test_torch_attention(void **state) {
    (void)state;
    const int seg[6] = {0, 0, 1, 1, 1, 1};
    attention_case("causal", NULL, torch_attn_causal_out, torch_attn_causal_dq, torch_attn_causal_dk,
                   torch_attn_causal_dv);
    attention_case("seg", seg, torch_attn_seg_out, torch_attn_seg_dq, torch_attn_seg_dk, torch_attn_seg_dv);
}

static void test_torch_swiglu(void **state) {
    (void)state;
    float *g = gen(9, 31, 37, 4.0), *u = gen(9, 23, 41, 1.0), *dout = gen(9, 19, 43, 1.0);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        float *out = zeros_f(9), *dg = zeros_f(9), *du = zeros_f(9);
        const size_t b9 = 9 * sizeof(float);
        Mirrors mr = mirrors_on(dev);
        float *g_d = mirror(&mr, g, b9), *u_d = mirror(&mr, u, b9), *dout_d = mirror(&mr, dout, b9);
        float *out_d = mirror(&mr, out, b9), *dg_d = mirror(&mr, dg, b9), *du_d = mirror(&mr, du, b9);
        OP(dev, swiglu_forward, out_d, g_d, u_d, 9);
        OP(dev, swiglu_backward, dg_d, du_d, dout_d, g_d, u_d, 9);
        fetch(dev, out, out_d, b9);
        fetch(dev, dg, dg_d, b9);
        fetch(dev, du, du_d, b9);
        mirrors_free(&mr);
        check(&devs[d], "swiglu out", rel_vs(out, torch_swiglu_out, 9), 2e-6);
        check(&devs[d], "swiglu dgate", rel_vs(dg, torch_swiglu_dgate, 9), 2e-6);
        check(&devs[d], "swiglu dup", rel_vs(du, torch_swiglu_dup, 9), 2e-6);
        free(out); free(dg); free(du);
    }
    free(g); free(u); free(dout);
}

static void test_torch_cross_entropy(void **state) {
    (void)state;
    enum { N = 5, C = 6, V = 7 };
    const int targets[N] = {3, -1, 0, 6, 2};
    float *h = gen(N * C, 29, 61, 1.5), *W = gen(V * C, 31, 67, 1.0);
    for (int d = 0; d < n_devs; d++) {
        Device *dev = &devs[d].dev;
        float *dh = zeros_f(N * C), *dW = zeros_f(V * C);
        int count = 0;
        Mirrors mr = mirrors_on(dev);
        float *dh_d = mirror(&mr, dh, N * C * sizeof(float)), *dW_d = mirror(&mr, dW, V * C * sizeof(float));
        float *h_d = mirror(&mr, h, N * C * sizeof(float)), *W_d = mirror(&mr, W, V * C * sizeof(float));
        int *t_d = mirror(&mr, targets, sizeof targets);
        double loss = OP(dev, classifier, dh_d, dW_d, NULL, h_d, W_d, t_d, NULL, N, C, V, 1.0f, &count, MATMUL_FP32);
        fetch(dev, dh, dh_d, N * C * sizeof(float));
        fetch(dev, dW, dW_d, V * C * sizeof(float));
        mirrors_free(&mr);
        printf("  %-26s cross-entropy sum %.8f (torch %.8f), count %d\n", devs[d].name, loss, torch_ce_loss, count);
        assert_int_equal(count, 4);
        if (!(fabs(loss - torch_ce_loss) <= dev_tol(&devs[d], 1e-6, 1e-4) * torch_ce_loss))
            fail_msg("%s: cross-entropy sum", devs[d].name);
        check(&devs[d], "classifier dh", rel_vs(dh, torch_ce_dh, N * C), 2e-6);
        check(&devs[d], "classifier dW", rel_vs(dW, torch_ce_dW, V * C), 2e-6);
        free(dh); free(dW);
    }
    double hd_[N * C], Wd[V * C];
    for (int i = 0; i < N * C; i++) hd_[i] = h[i];
    for (int i = 0; i < V * C; i++) Wd[i] = W[i];
    double loss_ref = classifier_ref(NULL, NULL, hd_, Wd, targets, NULL, N, C, V, 1.0);
    assert_true(fabs(loss_ref - torch_ce_loss) <= 1e-6 * torch_ce_loss);
    free(h); free(W);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        GPU_DEVICE_TEST,
        cmocka_unit_test(test_torch_rope),   cmocka_unit_test(test_torch_rmsnorm),
        cmocka_unit_test(test_torch_attention), cmocka_unit_test(test_torch_swiglu),
        cmocka_unit_test(test_torch_cross_entropy),
    };
    return cmocka_run_group_tests(tests, devices_setup, devices_teardown);
}

/* The generator (run with the developer venv's python; prints the arrays above):

# Prints the C arrays of tests/test_ops_torch.c: outputs of transformers'
# Qwen3 code (and torch autograd) on inputs both sides build from gen().
import re
import numpy as np, torch
from transformers import Qwen3Config
from transformers.models.qwen3 import modeling_qwen3 as q3

def gen(n, a, m, scale=1.0):
    return np.array([np.float32((((i * a + 7) % m) / (0.5 * m) - 1.0) * scale) for i in range(n)], dtype=np.float32)

def carr(name, x):
    x = np.asarray(x, dtype=np.float32).ravel()
    vals = [re.sub(r"\.?0*p", "p", float(v).hex()) + "f" for v in x]   # exact hex floats
    lines, line = [], "   "
    for v in vals:
        if len(line) + len(v) + 2 > 110:
            lines.append(line)
            line = "   "
        line += " " + v + ","
    lines.append(line)
    return f"static const float {name}[{x.size}] = {{\n" + "\n".join(lines) + "\n};"

out = []
# RoPE table, head_dim 64, theta 1e6, positions 1, 1000, 40959 (first half of cos/sin).
cfg = Qwen3Config(head_dim=64, hidden_size=128, num_attention_heads=2, num_key_value_heads=1, rope_theta=1e6,
                  max_position_embeddings=40960)
rotary = q3.Qwen3RotaryEmbedding(cfg)
cos, sin = rotary(torch.zeros(1, 1, 64), torch.tensor([[1, 1000, 40959]]))
out.append(carr("torch_rope_cos", cos[0, :, :32].numpy()))
out.append(carr("torch_rope_sin", sin[0, :, :32].numpy()))
# RoPE applied: head_dim 8, 2 heads, positions 0, 3, 7, theta 1e4; x[N=3, 2*8].
cfg = Qwen3Config(head_dim=8, hidden_size=16, num_attention_heads=2, num_key_value_heads=1, rope_theta=1e4)
rotary = q3.Qwen3RotaryEmbedding(cfg)
pos = torch.tensor([[0, 3, 7]])
cos, sin = rotary(torch.zeros(1, 1, 8), pos)
x = torch.from_numpy(gen(48, 37, 101, 2.0)).reshape(1, 3, 2, 8).transpose(1, 2)
y, _ = q3.apply_rotary_pos_emb(x, x, cos, sin)
out.append(carr("torch_rope_apply", y.transpose(1, 2).reshape(-1).numpy()))
# RMSNorm N=3, C=10, eps 1e-6, with gradients of sum(out * dout).
x = torch.from_numpy(gen(30, 29, 97, 3.0)).reshape(3, 10).requires_grad_()
norm = q3.Qwen3RMSNorm(10, eps=1e-6)
with torch.no_grad():
    norm.weight.copy_(torch.from_numpy(gen(10, 13, 31, 1.5)))
y = norm(x)
(y * torch.from_numpy(gen(30, 17, 53)).reshape(3, 10)).sum().backward()
out += [carr("torch_rms_out", y.detach().numpy()), carr("torch_rms_dx", x.grad.numpy()),
        carr("torch_rms_dw", norm.weight.grad.numpy())]
# Attention B=1, T=6, nq=4, nkv=2, hd=4 through eager_attention_forward, causal
# and block-diagonal causal for seg = [0,0,1,1,1,1].
T, nq, nkv, hd = 6, 4, 2, 4
class M(torch.nn.Module):
    num_key_value_groups = nq // nkv
m = M().eval()
for name, seg in (("causal", None), ("seg", [0, 0, 1, 1, 1, 1])):
    q = torch.from_numpy(gen(T * nq * hd, 37, 101, 2.0)).reshape(1, T, nq, hd).transpose(1, 2).requires_grad_()
    k = torch.from_numpy(gen(T * nkv * hd, 41, 103, 2.0)).reshape(1, T, nkv, hd).transpose(1, 2).requires_grad_()
    v = torch.from_numpy(gen(T * nkv * hd, 43, 107)).reshape(1, T, nkv, hd).transpose(1, 2).requires_grad_()
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
    if seg is not None:
        s = torch.tensor(seg)
        allowed &= s[:, None] == s[None, :]
    mask = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    o, _ = q3.eager_attention_forward(m, q, k, v, mask, scaling=hd ** -0.5)
    (o.reshape(T, nq * hd) * torch.from_numpy(gen(T * nq * hd, 47, 109)).reshape(T, nq * hd)).sum().backward()
    out += [carr(f"torch_attn_{name}_out", o.detach().reshape(-1).numpy()),
            carr(f"torch_attn_{name}_dq", q.grad.transpose(1, 2).reshape(-1).numpy()),
            carr(f"torch_attn_{name}_dk", k.grad.transpose(1, 2).reshape(-1).numpy()),
            carr(f"torch_attn_{name}_dv", v.grad.transpose(1, 2).reshape(-1).numpy())]
# SwiGLU through Qwen3MLP's activation: silu(gate) * up, n = 9.
g = torch.from_numpy(gen(9, 31, 37, 4.0)).requires_grad_()
u = torch.from_numpy(gen(9, 23, 41)).requires_grad_()
y = torch.nn.functional.silu(g) * u
(y * torch.from_numpy(gen(9, 19, 43))).sum().backward()
out += [carr("torch_swiglu_out", y.detach().numpy()), carr("torch_swiglu_dgate", g.grad.numpy()),
        carr("torch_swiglu_dup", u.grad.numpy())]
# Cross-entropy (sum over non-ignored), N=5, C=6, V=7, targets 3, ignored, 0, 6, 2.
h = torch.from_numpy(gen(30, 29, 61, 1.5)).reshape(5, 6).requires_grad_()
W = torch.from_numpy(gen(42, 31, 67)).reshape(7, 6).requires_grad_()
loss = torch.nn.functional.cross_entropy(h @ W.T, torch.tensor([3, -100, 0, 6, 2]), ignore_index=-100, reduction="sum")
loss.backward()
out += [f"static const double torch_ce_loss = {float(loss.detach()):.9g};", carr("torch_ce_dh", h.grad.numpy()),
        carr("torch_ce_dW", W.grad.numpy())]
print("\n".join(out))
*/
