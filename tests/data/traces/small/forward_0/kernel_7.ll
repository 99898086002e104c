; ptc kernel 7 fused_add_add_layer_norm_7  <- %7, %8, %9
define void @fused_add_add_layer_norm_7(i64 %begin, i64 %end, ptr noalias %args) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %i.next, %loop ]
  ; buf12 = add(buf11, bias)
  %v0 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 0)
  ; buf13 = add(x, buf12)
  %v1 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 1)
  ; buf14 = welford(buf13)
  %v2 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 2)
  ; buf15 = layer_norm(buf13, buf14)
  %v3 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 3)
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
